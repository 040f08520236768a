"""Made-up examples of three model keys and four features, and their CSV and Parquet files."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FEATURES = ["f1", "f2", "f3", "f4"]


def make_examples(n=600, seed=0, keys=("a", "b", "c")):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4)) * [1e-3, 1.0, 1e3, 10.0]
    X[rng.random(X.shape) < 0.1] = 0.0
    w = np.array([1e3, -1.0, 1e-3, 0.2])
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ w)), 1, -1)
    key = [keys[i] for i in rng.integers(0, len(keys), size=n)]
    return X, y, key


def write_csv(path, X, y, keys):
    with open(path, "w") as f:
        f.write("id,segment,label," + ",".join(FEATURES) + "\n")
        for i in range(len(y)):
            values = ",".join("" if v == 0 else repr(float(v)) for v in X[i])
            f.write(f"e{i},{keys[i]},{y[i]},{values}\n")


def write_parquet(path, X, y, keys):
    columns = {"id": [f"e{i}" for i in range(len(y))], "segment": keys, "label": y.astype(float)}
    for j, n in enumerate(FEATURES):
        columns[n] = [None if v == 0 else float(v) for v in X[:, j]]
    pq.write_table(pa.table(columns), path)
