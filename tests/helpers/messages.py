"""The output messages as a strict consumer reads them: JSON with no NaN or Infinity token
(``json.loads`` accepts them by default; most other parsers do not)."""
import json
from pathlib import Path


def _no_constant(token):
    raise ValueError(f"{token} is not JSON: strict parsers refuse it")


def strict_loads(text):
    """One JSON document, refusing NaN, Infinity and -Infinity."""
    return json.loads(text, parse_constant=_no_constant)


def strict_json_lines(directory):
    """Every line of every JSON lines part file in ``directory``, strictly parsed."""
    rows = []
    for path in sorted(Path(directory).glob("part-*.jsonl")):
        rows += [strict_loads(line) for line in path.read_text("utf-8").splitlines()
                 if line.strip()]
    return rows


# --- the shipped JSON Schemas, checked without a validator library --------------------------

_TYPES = {"string": lambda v: isinstance(v, str), "null": lambda v: v is None,
          "boolean": lambda v: isinstance(v, bool),
          "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "object": lambda v: isinstance(v, dict)}
# the keywords the shipped schemas use; a schema with another fails the check (so that a
# keyword added there is not silently ignored here)
_KEYWORDS = {"$schema", "title", "description", "type", "properties", "required",
             "additionalProperties", "const", "enum", "minimum", "maximum"}


def check_schema(value, schema, where="message"):
    """Raise AssertionError (naming where) unless ``value`` follows ``schema``: the subset of
    JSON Schema (2020-12) that unitless/schemas uses, each keyword checked as the standard
    says."""
    unknown = set(schema) - _KEYWORDS
    assert not unknown, f"{where}: schema keywords this checker does not know: {unknown}"
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        assert any(_TYPES[t](value) for t in types), f"{where}: {value!r} is not {types}"
    if "const" in schema:
        assert value == schema["const"], f"{where}: {value!r} is not {schema['const']!r}"
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} is not one of {schema['enum']}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            assert value >= schema["minimum"], f"{where}: {value} < {schema['minimum']}"
        if "maximum" in schema:
            assert value <= schema["maximum"], f"{where}: {value} > {schema['maximum']}"
    if isinstance(value, dict):
        missing = [k for k in schema.get("required", []) if k not in value]
        assert not missing, f"{where}: missing {missing}"
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(properties))
            assert not extra, f"{where}: fields the schema does not have: {extra}"
        for name, item in value.items():
            if name in properties:
                check_schema(item, properties[name], f"{where}.{name}")


def output_of(row):
    """Which output a JSON row (a message or a JSON lines row) claims to be: its ``schema``,
    else told by the fields only one output has (None: not a unitless output)."""
    from unitless.schemas import DEAD_LETTER_ID, PREDICTION_ID, SCORE_ID
    if "schema" in row:
        return row["schema"]
    if "reason" in row and "raw_base64" in row:
        return DEAD_LETTER_ID
    if "prediction" in row:
        return PREDICTION_ID if "served" in row else SCORE_ID
    return None


def check_message(row, output_id=None):
    """``row`` follows the shipped JSON Schema of its output (``output_of`` unless given)."""
    from unitless.schemas import json_schema
    output_id = output_id or output_of(row)
    assert output_id is not None, f"not a unitless output message: {sorted(row)}"
    check_schema(row, json_schema(output_id), output_id)


def check_json_outputs(root):
    """Every JSON lines part file of a unitless output under ``root`` (predictions, scores,
    dead letters), each line parsed strictly and checked against its output's schema; returns
    how many rows were checked."""
    checked = 0
    for path in sorted(Path(root).rglob("part-*.jsonl")):
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = strict_loads(line)
            except ValueError as err:
                raise AssertionError(f"{path}:{n}: {err}") from None
            if isinstance(row, dict) and output_of(row) is not None:
                check_message(row)
                checked += 1
    return checked
