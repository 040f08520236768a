"""Public data sets bundled inside pinned PyPI wheels (scikit-learn's, river's): the wheel
fetched once with ``pip download`` (never installed: no scipy, no pandas), a file read out of it
(a wheel is a zip), and each set written once as a CSV ``label,features…`` in its published row
order, every value as published (results/tmp/), for the product's reader."""
import csv
import gzip
import io
import os
import re
import subprocess
import sys
import zipfile
from math import isfinite
from pathlib import Path
from typing import Callable, NamedTuple

from .paths import ROOT, TMP

CACHE = Path(os.environ.get("UNITLESS_WHEELS", Path.home() / ".cache" / "unitless" / "wheels"))
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def wheel_member(package, version, member):
    """The bytes of ``member`` in the wheel of ``package==version`` (downloaded into CACHE the
    first time, with the venv's pip: ``--no-deps --only-binary :all:``)."""
    stem = f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}-"
    found = sorted(p for p in CACHE.glob("*.whl") if p.name.lower().startswith(stem))
    if not found:
        python = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable
        cmd = [python, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               f"{package}=={version}", "-d", str(CACHE)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(p for p in CACHE.glob("*.whl") if p.name.lower().startswith(stem))
        if done.returncode or not found:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}"
                               f"{done.stderr[-2000:]}")
    with zipfile.ZipFile(found[0]) as whl:
        return whl.read(member)


def unzip(member, then):
    """Rows from a zip's ``member`` (bytes), read by ``then``."""
    return lambda data: then(zipfile.ZipFile(io.BytesIO(data)).read(member))


def gunzip(then):
    return lambda data: then(gzip.decompress(data))


def _lines(data):
    return list(csv.reader(io.StringIO(data.decode("utf-8"))))


def sklearn_csv(data):
    """scikit-learn's CSV: a first line ``n_samples,n_features,class names…``, then rows of
    the features and the class number last (as ``sklearn.datasets._base.load_csv_data``)."""
    head, *rows = _lines(data)
    n, d = int(head[0]), int(head[1])
    if len(rows) != n:
        raise ValueError(f"{n} samples announced, {len(rows)} rows")
    return [f"x{j + 1}" for j in range(d)], [(r[-1], r[:-1]) for r in rows]


def no_header_last(data):
    """CSV without a header, the label last (digits: as ``load_digits`` reads it)."""
    rows = _lines(data)
    return [f"x{j + 1}" for j in range(len(rows[0]) - 1)], [(r[-1], r[:-1]) for r in rows]


def named_last(label):
    """A CSV with a header line, the label the column ``label`` (river's: the last)."""
    def rows(data):
        names, *rest = _lines(data)
        if names[-1] != label:
            raise ValueError(f"label column {label!r} is not last in {names}")
        return names[:-1], [(r[-1], r[:-1]) for r in rest]
    return rows


def libsvm(data):
    """libsvm lines ``label i:v …`` (1-based indices) as dense rows, an absent index 0."""
    parsed = [(label, dict(t.split(":") for t in tokens))
              for label, *tokens in (line.split() for line in data.decode().splitlines()
                                     if line.strip())]
    d = max(int(i) for _, x in parsed for i in x)
    return [f"x{j}" for j in range(1, d + 1)], [(y, [x.get(str(j), "0") for j in range(1, d + 1)])
                                                 for y, x in parsed]


class Public(NamedTuple):
    package: str
    version: str
    member: str
    rows: Callable  # bytes -> (feature names, [(label, [value text…])…])
    source: str  # what it is, where first published


SKLEARN, RIVER = ("scikit-learn", "1.9.1"), ("river", "0.26.1")
SETS = {
    "breast cancer": Public(*SKLEARN, "sklearn/datasets/data/breast_cancer.csv", sklearn_csv,
                            "Wisconsin Diagnostic Breast Cancer (UCI; label 0 = malignant, "
                            "1 = benign)"),
    "digits": Public(*SKLEARN, "sklearn/datasets/data/digits.csv.gz", gunzip(no_header_last),
                     "Optical Recognition of Handwritten Digits (UCI; its 1,797-row test part, "
                     "8×8 counts 0..16)"),
    "wine": Public(*SKLEARN, "sklearn/datasets/data/wine_data.csv", sklearn_csv,
                   "Wine (UCI; published sorted by class)"),
    "iris": Public(*SKLEARN, "sklearn/datasets/data/iris.csv", sklearn_csv,
                   "Iris (Fisher 1936, UCI; published sorted by class)"),
    "phishing": Public(*RIVER, "river/datasets/phishing.csv.gz", gunzip(named_last("is_phishing")),
                       "Phishing websites (UCI Website Phishing, as river ships it: binary, "
                       "values in {0, 0.5, 1})"),
    "banana": Public(*RIVER, "river/datasets/banana.zip", unzip("banana.all.txt", libsvm),
                     "Banana (river's copy of OpenML 1460, libsvm, labels ±1)"),
    "segment": Public(*RIVER, "river/datasets/segment.csv.zip",
                      unzip("segment.csv.zip", named_last("category")),
                      "Image Segmentation (UCI Statlog, as river ships it: 18 features, without "
                      "UCI's constant region-pixel-count)"),
}


def _finite(text):
    try:
        return isfinite(float(text))
    except ValueError:
        return False


def origin(name):
    s = SETS[name]
    return f"{s.package}=={s.version}: {s.member}"


def public_csv(name):
    """results/tmp/public_NAME.csv: the set ``name`` of SETS as ``label,x…`` rows (the values'
    text as published, each checked to read as a finite float), written once; its path."""
    path = TMP / f"public_{name.replace(' ', '_')}.csv"
    if path.exists():
        return path
    s = SETS[name]
    names, rows = s.rows(wheel_member(s.package, s.version, s.member))
    lines = [",".join(["label", *names])]
    for n, (label, values) in enumerate(rows):
        values = [v.strip() for v in values]
        bad = [v for v in values if not _finite(v)]
        if len(values) != len(names) or bad or not label.strip():
            raise ValueError(f"{origin(name)}: row {n}: {len(values)} values for {len(names)} "
                             f"features, not finite: {bad}, label {label!r}")
        lines.append(",".join([label.strip(), *values]))
    TMP.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".part")
    part.write_text("\n".join(lines) + "\n")
    part.replace(path)
    return path
