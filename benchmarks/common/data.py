"""The data sets: the ScInOL slides' artificial stream, Shuttle, a sparse stream over 2^24
hashed features, any file read as `unitless train` parses it, and dense rows written as CSV."""
import numpy as np

from .paths import SHUTTLE

# the sparse stream: ACTIVE features an example of a VOCABULARY, hashed into 2^SPARSE_BITS
SPARSE_BITS, VOCABULARY, ACTIVE = 24, 1_000_000, 40

SIGMAS = 2.0 ** np.arange(-10, 11)  # σ_i = 2⁻¹⁰ … 2¹⁰, 21 features


def artificial_weights(rng):
    """w*_i = ±1/σ_i with random signs."""
    return rng.choice([-1.0, 1.0], size=SIGMAS.size) / SIGMAS


def artificial_data(rng, n, w_star):
    """The slides' artificial data: x_i ~ N(0, σ_i²), y ~ Bernoulli(sigmoid(xᵀw*)) as ±1."""
    X = rng.standard_normal((n, SIGMAS.size)) * SIGMAS
    p = 1.0 / (1.0 + np.exp(-(X @ w_star)))
    y = np.where(rng.random(n) < p, 1.0, -1.0)
    return X, y


def load_shuttle(which="shuttle.trn"):
    """Shuttle in file order: X (n × 9, float64), labels 1..7."""
    D = np.loadtxt(SHUTTLE / which)
    return D[:, :9].copy(), D[:, 9].copy()


def read_examples(path, fmt, spec, limit=None):
    """A file's examples as ``unitless train`` parses them (``connectors.files.read_file`` with
    a ``RecordSpec``: hashed feature names, one-hot categoricals, bias, label mapping), in file
    order: CSR arrays over the hashed indices, labels, {index: feature name}, dead letters."""
    from unitless.connectors.files import read_file
    blocks, dead, names = [], [], {}
    for block, d in read_file(str(path), fmt, spec):
        blocks.append(block)
        dead += d
        names.update(block.names)
    indptr = np.concatenate([[0]] + [b.indptr[1:] + s for b, s in
                                     zip(blocks, np.cumsum([0] + [b.indptr[-1] for b in blocks]))])
    ex = {"indptr": indptr, "indices": np.concatenate([b.indices for b in blocks]),
          "values": np.concatenate([b.values for b in blocks]),
          "labels": np.concatenate([b.labels for b in blocks]), "names": names, "dead": dead}
    return head(ex, limit) if limit else ex


def head(ex, n):
    """The first n examples of CSR arrays (a dict with indptr, indices, values, labels)."""
    end = ex["indptr"][min(n, len(ex["labels"]))]
    return dict(ex, indptr=ex["indptr"][:n + 1], indices=ex["indices"][:end],
                values=ex["values"][:end], labels=ex["labels"][:n])


def artificial_stream(n, rng):
    """n examples of the slides' artificial stream with new w* signs: (X, y, w*). ``rng`` is a
    seed or a numpy Generator (then drawn from where it stands)."""
    rng = np.random.default_rng(rng)
    w_star = artificial_weights(rng)
    X, y = artificial_data(rng, n, w_star)
    return X, y, w_star


def write_csv(path, X, y, keys=None, chunk=250_000, first_id=0, label=True, times=None):
    """A CSV file ``id[,key],label,x1..xd[,t]`` of dense rows (ids first_id.., labels as integers
    when they are), every number as the shortest text that reads back as the same float64;
    ``keys``: a string per row (e.g. model keys); ``label`` False: without the label column;
    ``times``: a record time per row (s), as column t. Written with Arrow in chunks; returns
    the path."""
    import pyarrow as pa
    import pyarrow.compute as pc
    n, d = X.shape
    names = ["id", *(["key"] if keys is not None else []), *(["label"] if label else []),
             *(f"x{j + 1}" for j in range(d)), *(["t"] if times is not None else [])]
    y = y.astype(np.int64) if np.array_equal(y, np.round(y)) else y
    with open(path, "w") as f:
        f.write(",".join(names) + "\n")
        for a in range(0, n, chunk):  # chunks keep each Arrow string array far below 2 GiB
            b = min(a + chunk, n)
            cols = [pc.cast(pa.array(np.arange(a, b) + first_id), pa.string())]
            cols += [pa.array(keys[a:b], pa.string())] if keys is not None else []
            cols += [pc.cast(pa.array(v), pa.string())
                     for v in ((y[a:b],) if label else ()) + tuple(X[a:b].T)
                     + ((times[a:b],) if times is not None else ())]
            lines = pc.binary_join_element_wise(*cols, ",").to_pylist()
            f.write("\n".join(lines) + "\n")
    return path


def sparse_stream(n, seed):
    """The sparse stream as a Batch over 2^24 hashed indices, bias last: ACTIVE of VOCABULARY
    features an example (Zipf-distributed, exponent 1.1), each on its own scale 10^U(−4, 4),
    weights w*_f = N(0, 1)/σ_f, y ~ Bernoulli(sigmoid(xᵀw*)). Returns (batch, bias index)."""
    from unitless.learner import make_batch
    rng = np.random.default_rng(seed)
    index = rng.choice(1 << SPARSE_BITS, size=VOCABULARY + 1, replace=False)  # feature -> hash
    sigma = 10.0 ** rng.uniform(-4, 4, size=VOCABULARY)
    w_star = rng.standard_normal(VOCABULARY) / sigma
    rank = np.arange(1, VOCABULARY + 1)
    p = rank ** -1.1
    features = np.stack([rng.choice(VOCABULARY, size=ACTIVE, replace=False, p=p / p.sum())
                         for _ in range(n)]) if n <= 2_000 else _zipf_rows(rng, n, p)
    values = rng.standard_normal((n, ACTIVE)) * sigma[features]
    margin = (values * w_star[features]).sum(axis=1)
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-margin)), 1.0, -1.0)
    indices = np.hstack([index[features], np.full((n, 1), index[VOCABULARY])])
    values = np.hstack([values, np.ones((n, 1))])
    return make_batch(np.arange(n + 1) * (ACTIVE + 1), indices.ravel(), values.ravel(), y), \
        int(index[VOCABULARY])


def _zipf_rows(rng, n, p):
    """n rows of ACTIVE features drawn by weight p (repeats within a row redrawn)."""
    cdf = np.cumsum(p / p.sum())
    rows = np.searchsorted(cdf, rng.random((n, ACTIVE)))
    for _ in range(100):
        rows.sort(axis=1)
        twice = np.zeros_like(rows, dtype=bool)
        twice[:, 1:] = rows[:, 1:] == rows[:, :-1]
        if not twice.any():
            return np.minimum(rows, VOCABULARY - 1)
        rows[twice] = np.searchsorted(cdf, rng.random(twice.sum()))
    raise RuntimeError("could not draw distinct features")
