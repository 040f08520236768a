"""Three reference runs of `unitless train` pinned: what they predict and checkpoint may change
only when a change means it to (a learner's math, a format), never by moving code (issue #60).

Each run's discrete outputs (ids, keys, labels, positions, counts, which rows were served) are
pinned exactly by a digest, and its numbers by sums over every prediction and every model
weight, to 1e-9 of their size: a compiled loop may round differently on another processor, a
changed update moves them by far more. After a change meant to alter them, write the new
figures with ``python -m tests.pipeline.test_reference_runs`` (from the repository's root).
"""
import gzip
import hashlib
import json
import math
import os
import pathlib

import numpy as np
import pyarrow as pa
import pytest

from tests.helpers.commands import train

BUNDLED = pathlib.Path(__file__).resolve().parents[2] / "unitless" / "data" / "artificial.csv.gz"
PREDICTION_FLOATS = ("prediction", "probability", "loss", "served_loss")
PREDICTION_EXACT = ("id", "model_key", "label", "error", "examples_seen", "position", "served",
                    "event_time")
# a checkpoint's metadata that says when and where it was written, not what was learned
UNPINNED_METADATA = ("time", "checksum")


def _inputs(tmp):
    """The bundled example's rows, keyed by id modulo 3, as a features file without labels and
    a labels file in another order (each fifth label first, then the rest)."""
    with gzip.open(BUNDLED, "rt") as f:
        header, *rows = f.read().splitlines()
    keyed = tmp / "keyed.csv"
    keyed.write_text("\n".join([header + ",key"] + [
        f"{row},k{int(row.split(',')[0][1:]) % 3}" for row in rows]) + "\n")
    features = tmp / "features.csv"
    features.write_text("\n".join([header.replace("id,label,", "id,") + ",key"] + [
        f"{row.split(',', 2)[0]},{row.split(',', 2)[2]},k{i % 3}"
        for i, row in enumerate(rows)]) + "\n")
    labels = tmp / "labels.csv"
    order = list(range(0, len(rows), 5)) + [i for i in range(len(rows)) if i % 5]
    labels.write_text("id,label,key\n" + "\n".join(
        f"e{i},{rows[i].split(',')[1]},k{i % 3}" for i in order) + "\n")
    return keyed, features, labels


def _runs(tmp):
    keyed, features, labels = _inputs(tmp)
    return {
        "bundled, nag": ["--input", BUNDLED, "--id-column", "id"],
        "three keys, scinol2, checkpoints every 700": [
            "--input", keyed, "--id-column", "id", "--model-key-column", "key",
            "--algorithm", "scinol2", "--checkpoint-every", "700"],
        "labels joined at the end, three keys, ng": [
            "--input", features, "--labels", labels, "--id-column", "id",
            "--model-key-column", "key", "--algorithm", "ng"],
    }


def _digest(values):
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def _sums(columns):
    """{name: [the sum, the sum weighted by row number]} of float columns (nulls as 0): the
    second moves when values trade places."""
    out = {}
    for name, values in columns.items():
        v = np.nan_to_num(np.asarray(values, np.float64))
        out[name] = [float(v.sum()), float((v * np.arange(1, len(v) + 1)).sum())]
    return out


def figures(out):
    """What a run's outputs under ``out`` say: {"exact": digest, "sums": {...}}."""
    from unitless.connectors.files import read_output
    from unitless.store.catalog import latest_checkpoint, model_keys, read_checkpoint
    predictions = read_output(str(out / "pred"))
    rows = sorted(predictions.to_pylist(),
                  key=lambda r: (r["model_key"], r["served"], os.path.basename(r["source"]),
                                 r["position"]))
    exact = [[r[c] for c in PREDICTION_EXACT] + [os.path.basename(r["source"])] for r in rows]
    floats = {c: [r[c] for r in rows] for c in PREDICTION_FLOATS}
    models = str(out / "models")
    for key in sorted(model_keys(models)):
        table = read_checkpoint(latest_checkpoint(models, key))
        meta = json.loads(table.schema.metadata[b"unitless"])
        for name in UNPINNED_METADATA:
            meta.pop(name, None)
        exact.append([key, json.dumps(meta, sort_keys=True).replace(str(BUNDLED.parent), "")
                      .replace(str(out.parent), ""), table.schema.names])
        for name in table.schema.names:
            column = table.column(name)
            if pa.types.is_floating(column.type):
                floats[f"{key}/{name}"] = column.to_numpy()
            else:
                exact.append([key, name, column.to_pylist()])
    return {"exact": _digest(exact), "sums": _sums(floats)}


REFERENCE = {
    "bundled, nag": {"exact": "a66b5d49261a79f7decca922c18c9584b07e58bdf524526b5fb5a87066d9248d", "sums": {
        "prediction": [-128.90654074695715, -29858.178342182655],
        "probability": [2484.550661861641, 6280055.482560527],
        "loss": [1672.623284724555, 3886392.642990919],
        "served_loss": [0.0, 0.0],
        "/w": [-1033.8663846775746, -11410.623638610594],
        "/s": [7626.953425710002, 89321.43575328],
        "/G": [685569283.2424451, 7284471914.976092],
    }},
    "three keys, scinol2, checkpoints every 700": {"exact": "9137200430844847b861bf9de25eba16c4cd1164e18fcf4ebdb0ba3f1fb63157", "sums": {
        "prediction": [-112.60732447142308, -171566.81109921375],
        "probability": [2483.2587279543477, 6237233.2389819585],
        "loss": [2188.6166071582643, 5300929.480480723],
        "served_loss": [0.0, 0.0],
        "k0/w": [-711.0217362739525, -7233.706874397871],
        "k0/S2": [304063003.0334032, 3238191326.948941],
        "k0/G": [88830.64903636511, 1203875.4194696362],
        "k0/M": [7120.80985714, 84277.58796325001],
        "k0/eta": [237.60243182338652, 2604.052423283988],
        "k1/w": [-658.3807938934098, -7164.784522360652],
        "k1/S2": [313491207.69160134, 3312328902.3356323],
        "k1/G": [105635.80180130231, 1412560.6506512272],
        "k1/M": [7371.2112357099995, 85159.41041128001],
        "k1/eta": [257.8006708816121, 2912.361408488889],
        "k2/w": [-690.611852855872, -7343.418396920418],
        "k2/S2": [316570993.53297323, 3364788460.0172143],
        "k2/G": [108180.9932506051, 1424484.137091574],
        "k2/M": [7290.3872355799995, 85951.70764447],
        "k2/eta": [246.85845374571926, 2787.757778770087],
    }},
    "labels joined at the end, three keys, ng": {"exact": "90eb95e5f95f66cdc9e12bbc8d9627d3bc0683059505d3aedf99552404dfe380", "sums": {
        "prediction": [-112.1981212321116, 358728.67051353375],
        "probability": [4985.4580745023095, 25059705.632254865],
        "loss": [2026.4434063900082, 8247762.517753397],
        "served_loss": [3465.7359027997263, 14442298.898567867],
        "k0/w": [-977.6534425886463, -10615.321171838279],
        "k0/s": [7120.80985714, 84277.58796325001],
        "k1/w": [-719.0169778437531, -8033.817927707874],
        "k1/s": [7371.2112357099995, 85159.41041128001],
        "k2/w": [-1012.2875242964719, -10895.329971528656],
        "k2/s": [7290.3872355799995, 85951.70764447],
    }},
}


@pytest.mark.parametrize("name", sorted(REFERENCE) or ["(none written)"])
def test_reference_runs_predict_and_checkpoint_what_they_did(tmp_path, name):
    assert REFERENCE, ("no reference figures: write them with "
                       "python -m tests.pipeline.test_reference_runs")
    train(tmp_path / "out", *_runs(tmp_path)[name])
    found, expected = figures(tmp_path / "out"), REFERENCE[name]
    assert found["exact"] == expected["exact"], f"{name}: ids, keys, labels or counts changed"
    assert sorted(found["sums"]) == sorted(expected["sums"])
    for column, sums in expected["sums"].items():
        for got, want in zip(found["sums"][column], sums):
            assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9), (name, column, got, want)


if __name__ == "__main__":  # the figures of the code as it is, to paste as REFERENCE
    import tempfile
    written = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n, name in enumerate(_runs(pathlib.Path(tmp))):
            run = pathlib.Path(tmp) / str(n)
            run.mkdir()
            train(run / "out", *_runs(run)[name])
            written[name] = figures(run / "out")
    print("REFERENCE = {")
    for name, found in written.items():
        print(f'    "{name}": {{"exact": "{found["exact"]}", "sums": {{')
        print("".join(f'        "{column}": {sums!r},\n' for column, sums in found["sums"].items())
              + "    }},")
    print("}")
