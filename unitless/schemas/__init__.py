"""The one table of unitless's output messages: each one's schema id, its columns as Arrow
tables hold them, and the JSON Schema (a file shipped beside this module) that a consumer can
validate a message with.

* ``unitless.prediction/4``: what training writes for each example it learns or serves.
* ``unitless.score/1``: what scoring (``unitless score``, ``Score``) writes for each example.
  Scoring learns nothing, so the training fields (``examples_seen``, ``served``,
  ``served_loss``, ``event_time``) have no meaning there; its rows are their own message
  rather than predictions with those fields blank (docs/compatibility.md says why).
* ``unitless.dead_letter/1``: a refused record, as a JSON lines dead-letter file holds it.

Kafka prediction and score messages carry ``"schema": <id>``; JSON lines rows carry the same
fields without it. JSON outputs hold finite numbers only (no NaN or Infinity token)."""
import json
from dataclasses import dataclass
from importlib import resources

import pyarrow as pa

PREDICTION_ID = "unitless.prediction/4"
SCORE_ID = "unitless.score/1"
DEAD_LETTER_ID = "unitless.dead_letter/1"

PREDICTION_SCHEMA = pa.schema([
    ("id", pa.string()), ("model_key", pa.string()), ("prediction", pa.float64()),
    ("probability", pa.float64()), ("label", pa.float64()), ("loss", pa.float64()),
    ("error", pa.float64()), ("examples_seen", pa.int64()), ("source", pa.string()),
    ("position", pa.int64()), ("checkpoint_id", pa.string()), ("event_time", pa.float64()),
    ("served", pa.bool_()),
    # the loss of the prediction the example was served with, once its label came (``--labels``:
    # what users experienced); null where it was not served first
    ("served_loss", pa.float64()),
    # a row served apart from learning (``pipelines/serve.py``): seconds since the model state
    # that served it was published (null: not published yet, a fresh model; or not served
    # apart), and whether that was past --max-staleness
    ("model_age_seconds", pa.float64()), ("stale", pa.bool_()),
])
SCORE_SCHEMA = pa.schema([f for f in PREDICTION_SCHEMA if f.name in (
    "id", "model_key", "prediction", "probability", "label", "loss", "error", "source",
    "position", "checkpoint_id")])
# (a JSON lines file writes ``raw`` as text where it is UTF-8, and ``raw_base64`` beside it)
DEAD_LETTER_SCHEMA = pa.schema([("source", pa.string()), ("position", pa.int64()),
                                ("raw", pa.binary()), ("reason", pa.string())])


@dataclass(frozen=True)
class OutputSchema:
    id: str
    columns: pa.Schema
    json_file: str  # the JSON Schema of one message, in this package


OUTPUTS = {o.id: o for o in (
    OutputSchema(PREDICTION_ID, PREDICTION_SCHEMA, "prediction.json"),
    OutputSchema(SCORE_ID, SCORE_SCHEMA, "score.json"),
    OutputSchema(DEAD_LETTER_ID, DEAD_LETTER_SCHEMA, "dead_letter.json"),
)}


def schema_id(table: pa.Table) -> str:
    """The id of the output whose columns the table has, in their order (ValueError when it is
    none of them: a message is never stamped with a schema it does not follow)."""
    for output in OUTPUTS.values():
        if table.column_names == output.columns.names:
            return output.id
    raise ValueError(f"the columns {table.column_names} are not those of a unitless output "
                     f"({', '.join(OUTPUTS)})")


def json_schema(output_id: str) -> dict:
    """The JSON Schema of one message of the output ``output_id`` (as shipped)."""
    text = resources.files(__name__).joinpath(OUTPUTS[output_id].json_file).read_text("utf-8")
    return json.loads(text)
