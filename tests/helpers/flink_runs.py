"""The Flink tests' examples of nine model keys, a run's predictions, its checkpoints' check."""
import json

import numpy as np

from unitless.connectors.files import read_output
from unitless.store.catalog import checkpoint_history, latest_checkpoint, read_checkpoint

KEYS = [f"key-{i}" for i in range(9)]
# what a checkpoint's metadata may differ in between two runs: when and by which run
RUN_FIELDS = {"time", "token", "checksum"}


def weighted_examples(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * [1e-3, 1.0, 1e4]
    y = np.where(X @ [1e3, -1.0, 1e-4] + rng.normal(size=n) > 0, 1, -1)
    p = np.arange(1, len(KEYS) + 1, dtype=float)
    keys = rng.choice(len(KEYS), size=n, p=p / p.sum())
    return [{"id": f"{seed}-{i}", "segment": KEYS[keys[i]],
             "label": None if i % 9 == 8 else int(y[i]),
             "a": float(X[i, 0]), "b": float(X[i, 1]), "c": float(X[i, 2])} for i in range(n)]


def file_predictions(out):
    return read_output(f"{out}/pred").to_pylist()


def checkpoint(path):
    table = read_checkpoint(path)
    meta = json.loads(table.schema.metadata[b"unitless"])
    columns = {name: (table.column(name).to_numpy(zero_copy_only=False).tobytes()
                      if table.schema.field(name).type != "string"
                      else table.column(name).to_pylist())
               for name in table.column_names}
    # by file name: the same file anywhere
    for field in ("input_positions", "unlearned_sources", "learned_through",
                  "restart_positions"):
        meta[field] = {source.rsplit("/", 1)[-1]: position
                       for source, position in (meta.get(field) or {}).items()}
    # where a resumed run may restart a partition lags what the model learned on arrival
    # until the watermark passes it, and when that is depends on the runner: a lower bound
    restart = meta.pop("restart_positions")
    meta.pop("watermark_passed", None)
    assert all(p <= meta["input_positions"].get(s, p) for s, p in restart.items()), meta
    return {k: v for k, v in meta.items() if k not in RUN_FIELDS}, columns


def kept_states(model_dir, key):
    """{examples seen: where} of the model's kept checkpoints (the last of each count: a model
    is checkpointed again at the same count when only its restart positions moved, which
    depends on the runner's bundles)."""
    return {meta["examples_seen"]: where for where, meta in checkpoint_history(str(model_dir),
                                                                                 key)}


def assert_same_checkpoints(got_dir, want_dir, rows):
    for key in sorted({r["segment"] for r in rows}):
        got, want = kept_states(got_dir, key), kept_states(want_dir, key)
        assert max(got) == max(want), key
        for examples in sorted(set(got) & set(want)):
            assert checkpoint(got[examples]) == checkpoint(want[examples]), f"{key}@{examples}"
        got = latest_checkpoint(str(got_dir), key)
        meta, _ = checkpoint(got)  # the newest: every example of the key learned
        assert meta["examples_seen"] == sum(r["segment"] == key and r["label"] is not None
                                            for r in rows)
        last = json.loads(read_checkpoint(got).schema.metadata[b"unitless"])
        assert last.get("restart_positions", {}) == {  # (the watermark passed everything)
            s: p for s, p in last["input_positions"].items()
            if s in last.get("restart_positions", {})}
