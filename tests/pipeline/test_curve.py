"""`unitless curve`: a real training run's predictions give, per model key, a progressive loss
and error rate equal to the checkpoint's, whatever duplicates (at-least-once delivery), file
order, malformed lines or served predictions the predictions hold; and a PNG of the curves."""
import glob
import logging
import shutil
import sys

import numpy as np
import pytest

from unitless.cli.main import main
from unitless.reports.curve import curves, read_predictions
from unitless.reports.summary import model_lines

from tests.helpers.commands import train


def curve_rows(n):
    """Examples of three keys; every seventh without a label (served: not on the curve)."""
    return [f"e{i},{'abc'[i % 3] if i % 5 else 'a'},"
            f"{'' if i % 7 == 6 else 1 if (i * 7) % 5 < 3 else -1},"
            f"{i % 11 - 5},{(i % 3) * 1e4}" for i in range(n)]


def curve_run(out, fmt="jsonl"):
    """A run over 1,200 rows of two keys, its predictions in ``fmt``."""
    data = out / "d.csv"
    out.mkdir(parents=True, exist_ok=True)
    data.write_text("id,segment,label,x,z\n" + "".join(r + "\n" for r in curve_rows(1200)))
    return train(out, "--input", data, "--id-column", "id", "--model-key-column", "segment",
                 "--output-format", fmt, "--chunk-size", "100", "--checkpoint-every", "150")


@pytest.fixture(scope="module")
def curve_out(tmp_path_factory):
    return curve_run(tmp_path_factory.mktemp("curve"))


def checkpointed(out):
    return {m.key: m for m in model_lines(str(out / "models"))}


def assert_matches_checkpoints(found, out):
    expected = checkpointed(out)
    assert set(found) == set(expected) == {"a", "b", "c"}
    for key, m in expected.items():
        c = found[key]
        assert list(c["seen"]) == list(range(1, m.examples + 1))
        assert c["loss"][-1] == pytest.approx(m.progressive_loss, rel=1e-9, abs=0)
        assert c["error"][-1] == pytest.approx(m.error_rate, rel=1e-9, abs=0)


def test_the_curve_ends_at_the_checkpoints_progressive_loss_and_is_drawn(curve_out, tmp_path,
                                                                         capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "out" / "curve.png"
    assert main(["curve", str(curve_out / "pred"), "--output", str(png)]) == 0
    out = capsys.readouterr().out.splitlines()
    data = png.read_bytes()
    assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"
    assert out[-1] == f"curve: {png}"
    for key, m in checkpointed(curve_out).items():  # the table shows the checkpoint's figures
        line = next(line for line in out if line.startswith(repr(key)))
        _, n, last, loss, error = line.split()
        assert int(n.replace(",", "")) == int(last.replace(",", "")) == m.examples
        assert float(loss) == pytest.approx(m.progressive_loss, abs=1e-6)
        assert float(error) == pytest.approx(m.error_rate, abs=1e-4)


def test_the_curves_equal_the_checkpoints_in_every_output_format(curve_out, tmp_path):
    assert_matches_checkpoints(curves(read_predictions([str(curve_out / "pred")])[0]), curve_out)
    for fmt in ("parquet", "csv"):
        out = curve_run(tmp_path / fmt, fmt)
        assert glob.glob(str(out / "pred" / f"part-*.{fmt}"))
        assert_matches_checkpoints(curves(read_predictions([str(out / "pred")])[0]), out)


@pytest.mark.hand_written_outputs
def test_duplicated_reordered_and_malformed_predictions_do_not_change_the_curves(
        curve_out, tmp_path, caplog):
    before = curves(read_predictions([str(curve_out / "pred")])[0])
    parts = sorted(glob.glob(str(curve_out / "pred" / "part-*.jsonl")))
    assert len(parts) > 1
    copy = tmp_path / "pred"
    shutil.copytree(curve_out / "pred", copy)
    shutil.copy(parts[0], copy / "part-copy.jsonl")  # a part file delivered twice
    lines = open(parts[-1], encoding="utf-8").read().splitlines()
    (copy / "part-mixed.jsonl").write_text("\n".join(  # repeats, backwards, and garbage
        lines[::-1] + ["{not json", '{"model_key": "a"}', '"a string"',
                       '{"model_key": "a", "examples_seen": "3", "loss": 1}']) + "\n")
    with caplog.at_level(logging.WARNING, logger="unitless"):
        found, skipped = read_predictions([str(copy)])
    assert skipped == 4
    assert "skipped 4 malformed prediction rows" in caplog.text
    after = curves(found)
    assert set(after) == set(before)
    for key in before:
        for name in ("seen", "loss", "error"):
            np.testing.assert_array_equal(after[key][name], before[key][name])
    # files named one by one give the same curves as their directory
    by_file = curves(read_predictions(parts)[0])
    assert all(np.array_equal(by_file[k]["loss"], before[k]["loss"]) for k in before)
    assert_matches_checkpoints(after, curve_out)


def test_a_missing_path_or_no_predictions_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["curve", str(tmp_path / "nope"), "--output", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"unitless: error: predictions not found: {tmp_path / 'nope'}"]
    (tmp_path / "empty").mkdir()
    assert main(["curve", str(tmp_path / "empty"), "--output", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"unitless: error: no predictions found in {tmp_path / 'empty'}"]
    assert not (tmp_path / "c.png").exists()


def test_without_matplotlib_the_error_names_the_extra(curve_out, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    assert main(["curve", str(curve_out / "pred"), "--output", str(tmp_path / "c.png")]) == 2
    captured = capsys.readouterr()
    assert "'a'" in captured.out  # the table comes first: useful without the picture
    assert captured.err.strip().splitlines() == [
        "unitless: error: drawing the curve needs matplotlib: pip install 'unitless[plot]'"]
    assert not (tmp_path / "c.png").exists()
