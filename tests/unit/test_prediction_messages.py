"""Prediction messages, encoded a column at a time, decode to exactly what json.dumps of each
row made (values and their types)."""
import json

import pytest

import pyarrow as pa

from unitless.connectors.kafka import prediction_messages
from unitless.parse.formats import FORMATS
from unitless.schemas import PREDICTION_ID, PREDICTION_SCHEMA, SCORE_ID, SCORE_SCHEMA

FLOATS = [0.5, 1.0, -0.0, 1e-7, 1.5e-05, 1e15, 1e16, 1e22, 0.1 + 0.2, 5e-324,
          1.7976931348623157e308, None, 3.0, -2.0]
STRINGS = ["e1", 'quote " here', "back\\slash", "tab\there", "line\nbreak", "é€😀", "\x00\x7f",
           "", None, "plain id-1", "/", "k%41", "x" * 300, "\u2028", "'", "{}"]


def same(a, b):
    """Equal values of equal types."""
    return type(a) is type(b) and a == b


def table_of(schema, n):
    columns = {}
    for i, field in enumerate(schema):
        if pa.types.is_floating(field.type):
            columns[field.name] = [FLOATS[(i + j) % len(FLOATS)] for j in range(n)]
        elif pa.types.is_boolean(field.type):
            columns[field.name] = [None if j % 5 == 4 else j % 3 == 0 for j in range(n)]
        elif pa.types.is_integer(field.type):
            columns[field.name] = [None if j % 7 == 3 else (-1) ** j * j * 10 ** (j % 13)
                                   for j in range(n)]
        else:
            columns[field.name] = [STRINGS[(i + j) % len(STRINGS)] for j in range(n)]
    return pa.table(columns, schema=schema)


def test_messages_decode_to_what_json_dumps_of_each_row_made():
    for schema, schema_id in ((PREDICTION_SCHEMA, PREDICTION_ID), (SCORE_SCHEMA, SCORE_ID)):
        table = table_of(schema, 200)
        for message, row in zip(prediction_messages(table), table.to_pylist(), strict=True):
            expected = json.loads(json.dumps({"schema": schema_id, **row}))
            got = json.loads(message)
            assert list(got) == list(expected)
            assert all(same(got[k], expected[k]) for k in expected), (message, expected)
            assert message.isascii()


def test_plain_columns_take_the_fast_path_and_equal_json_dumps_byte_for_byte():
    table = pa.table({"id": ["a", "b"], "model_key": ["k", "k"], "prediction": [0.25, 2.0],
                      "probability": [None, 0.5], "label": [1.0, None], "loss": [0.5, None],
                      "error": [0.0, None], "source": ["s", None], "position": [1, 2],
                      "checkpoint_id": ["k@3", "k@3"]}, schema=SCORE_SCHEMA)
    assert prediction_messages(table) == [
        json.dumps({"schema": SCORE_ID, **row}).encode() for row in table.to_pylist()]


def test_a_table_of_no_output_schema_is_no_message():
    """A message is never stamped with a schema whose fields it does not carry."""
    with pytest.raises(ValueError, match="not those of a unitless output"):
        prediction_messages(pa.table({"id": ["a"], "prediction": [0.5]}))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_value_that_is_not_finite_fails_the_message_and_the_json_lines_file(value):
    """JSON has no NaN or Infinity: a bare token would be refused by a strict consumer, so a
    table holding one (which the steps before refuse, with the reason) is never written."""
    table = table_of(SCORE_SCHEMA, 2).set_column(2, "prediction", pa.array([0.5, value]))
    with pytest.raises(ValueError, match="'prediction' holds a value that is not finite"):
        prediction_messages(table)
    with pytest.raises(ValueError, match="'prediction' holds a value that is not finite"):
        FORMATS["jsonl"].write(table)
