"""One output contract, published: the JSON Schemas of the prediction, score and dead-letter
messages ship in the package, match the columns the code writes, and the messages real runs
write (JSON lines files and Kafka message values) follow them, read by a strict parser. Every
test's JSON lines outputs are checked the same way after it (conftest.py)."""
import json
import math
import tomllib
from pathlib import Path

import pytest

from tests.helpers.commands import train
from tests.helpers.messages import (check_json_outputs, check_message, strict_json_lines,
                                    strict_loads)
from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.connectors.kafka import prediction_messages
from unitless.schemas import (DEAD_LETTER_ID, OUTPUTS, PREDICTION_ID, SCORE_ID, json_schema,
                              schema_id)

REPO = Path(__file__).resolve().parents[2]


def test_each_shipped_schema_has_exactly_its_outputs_columns():
    for output in OUTPUTS.values():
        schema = json_schema(output.id)
        fields = list(output.columns.names)
        if output.id == DEAD_LETTER_ID:  # (JSON lines: raw as text, and its bytes in base64)
            fields.insert(fields.index("raw") + 1, "raw_base64")
        else:
            assert schema["properties"]["schema"] == {**schema["properties"]["schema"],
                                                      "const": output.id}
        assert schema["required"] == fields, output.id
        assert set(schema["properties"]) - {"schema"} == set(fields), output.id
        assert schema["additionalProperties"] is False


def test_the_schemas_are_package_data():
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "schemas/*.json" in settings["tool"]["setuptools"]["package-data"]["unitless"]
    shipped = {p.name for p in (REPO / "unitless" / "schemas").glob("*.json")}
    assert shipped == {o.json_file for o in OUTPUTS.values()}


def rows_csv(path, n, unlabeled=()):
    lines = ["id,segment,label,x1,x2"]
    for i in range(n):
        x1, x2 = math.sin(i) * 1e-3, math.cos(i * 0.7) * 1e3
        label = "" if i in unlabeled else (1 if x1 * 1e3 - x2 * 1e-3 > 0 else -1)
        lines.append(f"e{i},{'ab'[i % 2]},{label},{x1!r},{x2!r}")
    lines.append("bad,a,1,oops,1")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_what_training_and_scoring_write_follows_the_schemas(tmp_path):
    data = rows_csv(tmp_path / "d.csv", 120, unlabeled={5, 17})
    keyed = ["--id-column", "id", "--model-key-column", "segment"]
    out = train(tmp_path / "run", "--input", data, *keyed, "--output-format", "jsonl")
    # (one model in memory: the two keys' models take turns, each read again when it returns)
    assert main(["score", "--input", str(data), *keyed, "--model-dir", str(out / "models"),
                 "--predictions", str(tmp_path / "scores"), "--output-format", "jsonl",
                 "--dead-letter", str(tmp_path / "score-dead"), "--models-in-memory", "1",
                 "--chunk-size", "10"]) == 0
    predictions = strict_json_lines(out / "pred")
    scores = strict_json_lines(tmp_path / "scores")
    dead = strict_json_lines(out / "dead") + strict_json_lines(tmp_path / "score-dead")
    assert len(predictions) == len(scores) == 120 and len(dead) == 2
    assert {s["checkpoint_id"] for s in scores} == {"a@60", "b@58"}
    for row in predictions:
        check_message(row, PREDICTION_ID)
    for row in scores:
        check_message(row, SCORE_ID)
    for row in dead:
        check_message(row, DEAD_LETTER_ID)
    # the contract tells them apart: a score is not a prediction, nor a prediction a score
    with pytest.raises(AssertionError, match="missing"):
        check_message(scores[0], PREDICTION_ID)
    with pytest.raises(AssertionError, match="fields the schema does not have"):
        check_message(predictions[0], SCORE_ID)
    # as Kafka message values: stamped with their schema, and following it
    for directory, output_id in ((out / "pred", PREDICTION_ID), (tmp_path / "scores", SCORE_ID)):
        table = read_output(str(directory))
        table = table.cast(OUTPUTS[output_id].columns)  # (JSON lines read back loosely typed)
        assert schema_id(table) == output_id
        for message in prediction_messages(table):
            row = strict_loads(message)
            assert row["schema"] == output_id
            check_message(row)
    assert check_json_outputs(tmp_path) == 120 + 120 + 2


def test_the_checker_refuses_what_breaks_the_contract(tmp_path):
    """The checks cannot pass vacuously: each kind of break is caught."""
    good = {"id": "e", "model_key": "a", "prediction": 0.5, "probability": 0.6, "label": None,
            "loss": None, "error": None, "source": "f", "position": 3, "checkpoint_id": "a@1"}
    check_message(good, SCORE_ID)
    for broken, why in [({**good, "position": 3.5}, "is not"), ({**good, "probability": 2},
                                                                 "> 1"),
                        ({k: v for k, v in good.items() if k != "loss"}, "missing"),
                        ({**good, "served": True}, "fields the schema does not have"),
                        ({**good, "schema": PREDICTION_ID}, "is not"),
                        ({**good, "error": 0.5}, "is not one of"),
                        ({**good, "prediction": None}, "is not")]:
        with pytest.raises(AssertionError, match=why):
            check_message(broken, SCORE_ID)
    with pytest.raises(ValueError, match="NaN is not JSON"):
        strict_loads('{"prediction": NaN}')
    with pytest.raises(ValueError, match="Infinity is not JSON"):
        strict_loads('{"prediction": -Infinity}')
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "part-1.jsonl").write_text(json.dumps({**good, "prediction": "x"}))
    with pytest.raises(AssertionError, match="prediction"):
        check_json_outputs(tmp_path / "out")
    (tmp_path / "out" / "part-1.jsonl").unlink()
