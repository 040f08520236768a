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
