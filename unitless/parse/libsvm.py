"""libsvm / svmlight text: read by the compiled reader (sparse_text.py), line by line where it
leaves a chunk."""
import re
from typing import Sequence

from .records import DeadLetter, ExampleBlock, quoted
from .rows import Builder, compiled_first, one_line, parse_each
from .spec import BadRecord, RecordSpec, as_float


# a libsvm feature index: a positive integer (leading zeros dropped: 007 is feature 7)
_LIBSVM_INDEX = re.compile(r"0*([1-9][0-9]*)")


def parse_libsvm(spec: RecordSpec, source: str, items: Sequence[tuple[int, bytes | str | None]]
                 ) -> tuple[ExampleBlock, list[DeadLetter]]:
    """label [qid:n] index:value ...; indices are positive integers, hashed by their decimal
    name like any other feature name; qid is ignored."""
    return compiled_first("libsvm", spec, source, items, libsvm_lines)


def libsvm_lines(spec: RecordSpec, source: str, items: Sequence[tuple[int, bytes | str | None]]
                 ) -> tuple[ExampleBlock, list[DeadLetter]]:
    """parse_libsvm, a line at a time."""
    b = Builder(spec, source)

    def one(line):
        parts = one_line(line).split("#", 1)[0].split()
        if not parts:
            raise BadRecord("empty record")
        label = spec.label_value(parts[0])
        features = []
        for token in parts[1:]:
            name, sep, value = token.partition(":")
            if not sep or not name:
                raise BadRecord(f"feature {quoted(token)} is not index:value")
            if name == "qid":
                continue
            index = _LIBSVM_INDEX.fullmatch(name)
            if index is None:
                raise BadRecord(f"feature index {quoted(name)} is not a positive integer")
            features.append((index.group(1), as_float(value, "feature", index.group(1))))
        return label, features

    parse_each(b, items, one)
    return b.block(), b.dead
