"""Every learner on a real data set in its raw form (UCI bank marketing: ';'-separated, quoted
categorical values, yes/no labels) through the command: no NaN or infinity in predictions or
checkpoints, and the progressive loss it prints is the mean loss of the predictions it wrote."""
import json

import numpy as np
import pytest

from unitless.cli import main
from unitless.connectors.files import read_output
from unitless.learner import ALGORITHMS
from unitless.pipelines.checkpoints import latest_checkpoint, read_checkpoint

CATEGORICAL = "job,marital,education,default,housing,loan,contact,month,day_of_week,poutcome"


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_learner_on_bank_marketing_stays_finite(tmp_path, shared_data, capsys,
                                                      algorithm):
    bits = "8" if ALGORITHMS[algorithm].matrices else "18"  # Alg. 2 keeps d×d matrices
    out = tmp_path / "out"
    code = main(["train", "--input", str(shared_data / "bank_marketing" / "bank-additional.csv"),
                 "--delimiter", ";", "--label-column", "y", "--positive-label", "yes",
                 "--categorical-columns", CATEGORICAL, "--algorithm", algorithm, "--bits", bits,
                 "--model-dir", str(out / "models"), "--predictions", str(out / "pred"),
                 "--dead-letter", str(out / "dead")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    predictions = read_output(str(out / "pred"))
    for column in ("prediction", "loss"):
        assert np.isfinite(predictions.column(column).to_numpy()).all(), column
    model = read_checkpoint(latest_checkpoint(str(out / "models"), ""))
    for column in model.column_names:
        if column not in ("class", "index", "name"):
            values = model.column(column).combine_chunks()
            if hasattr(values, "flatten"):
                values = values.flatten()
            assert np.isfinite(values.to_numpy()).all(), column
    meta = json.loads(model.schema.metadata[b"unitless"])
    assert meta["examples_seen"] == predictions.num_rows > 4000
    line = next(line for line in printed.splitlines() if line.startswith("''"))
    loss = float(line.split()[2])
    assert loss == pytest.approx(float(np.mean(predictions.column("loss").to_numpy())), abs=1e-6)


def test_kotlowski2s_non_finite_steps_on_bank_marketing_leave_no_trace(shared_data):
    """Regression: on these hashed features Alg. 2 meets a non-finite prediction at example
    610, and the NaN reaches coordinates no example carried (NaN × 0); refusing that example
    must restore them too, so the model equals one that never saw the refused examples."""
    from unitless.connectors.files import read_file
    from unitless.connectors.formats import LabelMap, RecordSpec
    from unitless.learner import bias_index, learn, learn_or_refuse, new_state
    spec = RecordSpec(label="y", bits=8, categorical=tuple(CATEGORICAL.split(",")),
                      delimiter=";", labels=LabelMap(positive="yes"))
    path = str(shared_data / "bank_marketing" / "bank-additional.csv")
    batch = next(read_file(path, "csv", spec, chunk_size=700))[0].batch()
    state = new_state("kotlowski2", 256, "logistic", bias_index=bias_index(8))
    rows, result, refused = learn_or_refuse(state, batch)
    assert refused and all(reason == "the prediction is not finite" for _, reason in refused)
    clean = new_state("kotlowski2", 256, "logistic", bias_index=bias_index(8))
    expected = learn(clean, batch.take(rows))
    assert result.scores.tobytes() == expected.scores.tobytes()
    assert state.V.tobytes() == clean.V.tobytes() and state.M.tobytes() == clean.M.tobytes()
    assert np.isfinite(state.M).all() and np.isfinite(state.V).all()
