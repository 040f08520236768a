"""Learner state: a few named flat numpy arrays and scalars, and its Arrow form.

The Arrow table has one row per (class, feature) whose state differs from the initial state,
columns ``class``, ``index``, ``name`` and one per state vector (matrices: one list column per
matrix holding that feature's row), and the schema metadata key ``unitless`` holding JSON with
the algorithm, loss, hyperparameters, dimension, scalars, examples seen and cumulative loss.
"""
import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .losses import LOSS_CODES, LIPSCHITZ
from .registry import MAX_MATRIX_DIM, get_algorithm

SCHEMA_VERSION = 1
METADATA_KEY = b"unitless"


@dataclass
class LearnerState:
    algorithm: str
    loss: str
    dim: int
    n_classes: int               # 1: binary or regression; K > 1: one-against-all, labels 1..K
    hyperparameters: dict
    V: np.ndarray                # vectors  [len(vectors), K, dim]
    M: np.ndarray                # matrices [len(matrices), K, dim, dim]
    S: np.ndarray                # scalars  [K, len(scalars)]
    bias_index: int = -1         # feature index of the constant feature, -1 if none
    examples_seen: int = 0
    cumulative_loss: float = 0.0
    feature_names: dict = field(default_factory=dict)  # index -> name, where known
    seen: np.ndarray = None      # bool [dim]: features some example has carried
    active: np.ndarray = None    # int64, sorted: the indices where ``seen`` holds

    def __post_init__(self):
        if self.seen is None:
            self.seen = np.zeros(self.dim, dtype=bool)
            self.active = np.zeros(0, dtype=np.int64)

    def mark_seen(self, indices):
        """Record the features of a batch: only they can leave their initial state."""
        new = indices[~self.seen[indices]]
        if new.size:
            self.seen[new] = True
            self.active = np.union1d(self.active, new)

    @property
    def spec(self):
        return get_algorithm(self.algorithm)

    def hp_array(self):
        return np.array([self.hyperparameters[h] for h in self.spec.hyperparameters],
                        dtype=np.float64)

    @property
    def weights(self):
        """The weight vector w, shape [K, dim]."""
        return self.V[0]

    def copy(self):
        return LearnerState(self.algorithm, self.loss, self.dim, self.n_classes,
                            dict(self.hyperparameters), self.V.copy(), self.M.copy(),
                            self.S.copy(), self.bias_index, self.examples_seen,
                            self.cumulative_loss, dict(self.feature_names), self.seen.copy(),
                            self.active.copy())

    def metadata(self):
        return {
            "schema_version": SCHEMA_VERSION,
            "algorithm": self.algorithm,
            "loss": self.loss,
            "hyperparameters": self.hyperparameters,
            "dim": self.dim,
            "n_classes": self.n_classes,
            "bias_index": self.bias_index,
            "scalars": {name: self.S[:, j].tolist() for j, name in enumerate(self.spec.scalars)},
            "examples_seen": self.examples_seen,
            "cumulative_loss": self.cumulative_loss,
            "progressive_loss": self.cumulative_loss / max(self.examples_seen, 1),
        }


def new_state(algorithm, dim, loss="logistic", n_classes=1, bias_index=-1, **hyperparameters):
    """A fresh learner. Unknown hyperparameters are an error; missing ones take defaults."""
    spec = get_algorithm(algorithm)
    if loss not in LOSS_CODES:
        raise ValueError(f"unknown loss {loss!r}; choose one of: {', '.join(LOSS_CODES)}")
    if n_classes > 1 and loss not in ("logistic", "hinge"):
        raise ValueError(f"multiclass (one-against-all) needs a classification loss, not {loss!r}")
    extra = set(hyperparameters) - set(spec.hyperparameters) - {"quantile_tau"}
    if extra:
        raise ValueError(f"{algorithm} has no hyperparameter {sorted(extra)}; "
                         f"it takes {sorted(spec.hyperparameters)}")
    hp = {}
    for name, default in spec.hyperparameters.items():
        value = hyperparameters.get(name)
        if value is None:
            value = LIPSCHITZ[loss] if default is None else default
        hp[name] = float(value)
    if loss == "quantile":
        hp["quantile_tau"] = float(hyperparameters.get("quantile_tau") or 0.5)
    if spec.matrices and dim > MAX_MATRIX_DIM:
        raise ValueError(f"{algorithm} keeps d×d matrices; dim {dim} exceeds {MAX_MATRIX_DIM}")
    K = max(int(n_classes), 1)
    state = LearnerState(
        algorithm, loss, int(dim), K, hp,
        V=np.zeros((len(spec.vectors), K, dim)),
        M=np.zeros((len(spec.matrices), K, dim, dim)),
        S=np.zeros((K, len(spec.scalars))),
        bias_index=int(bias_index))
    for j, (name, init) in enumerate(_initial_values(spec, hp)):
        state.V[j] = init
    return state


def _initial_values(spec, hp):
    for name in spec.vectors:
        init = spec.initial.get(name, 0.0)
        yield name, hp[init] if isinstance(init, str) else float(init)


def to_arrow(state, extra_metadata=None):
    """The state as an Arrow table (see module docstring)."""
    spec = state.spec
    K, dim = state.n_classes, state.dim
    init = np.array([v for _, v in _initial_values(spec, state.hyperparameters)])
    active = state.active  # only features some example carried can differ from the start
    changed = (state.V[:, :, active] != init[:, None, None]).any(axis=0)  # [K, active]
    if state.M.shape[0]:
        changed |= (state.M[:, :, active] != 0).any(axis=(0, 3))
    cls, j = np.nonzero(changed)
    idx = active[j]
    names = [state.feature_names.get(int(i)) for i in idx]
    columns = {"class": pa.array(cls.astype(np.int32)), "index": pa.array(idx.astype(np.int64)),
               "name": pa.array(names, type=pa.string())}
    for j, name in enumerate(spec.vectors):
        columns[name] = pa.array(state.V[j][cls, idx])
    for j, name in enumerate(spec.matrices):
        rows = state.M[j][cls, idx].reshape(-1)
        columns[name] = pa.FixedSizeListArray.from_arrays(pa.array(rows), dim)
    meta = state.metadata()
    if extra_metadata:
        meta.update(extra_metadata)
    table = pa.table(columns)
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})


def read_metadata(table_or_schema):
    schema = getattr(table_or_schema, "schema", table_or_schema)
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise ValueError("not a unitless model: the Arrow schema has no 'unitless' metadata")
    return json.loads(raw)


def from_arrow(table):
    """Rebuild the exact state written by ``to_arrow``."""
    meta = read_metadata(table)
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"model schema version {meta.get('schema_version')} is not supported "
                         f"(this unitless reads version {SCHEMA_VERSION})")
    hp = dict(meta["hyperparameters"])
    state = new_state(meta["algorithm"], meta["dim"], meta["loss"], meta["n_classes"],
                      meta["bias_index"], **hp)
    state.hyperparameters = hp
    spec = state.spec
    cls = table.column("class").to_numpy().astype(np.int64)
    idx = table.column("index").to_numpy().astype(np.int64)
    for j, name in enumerate(spec.vectors):
        state.V[j][cls, idx] = table.column(name).to_numpy()
    for j, name in enumerate(spec.matrices):
        flat = table.column(name).combine_chunks().flatten().to_numpy()
        state.M[j][cls, idx] = flat.reshape(len(idx), state.dim)
    for j, name in enumerate(spec.scalars):
        state.S[:, j] = meta["scalars"][name]
    state.examples_seen = int(meta["examples_seen"])
    state.cumulative_loss = float(meta["cumulative_loss"])
    names = table.column("name").to_pylist()
    state.feature_names = {int(i): n for i, n in zip(idx, names) if n is not None}
    state.mark_seen(idx)
    return state
