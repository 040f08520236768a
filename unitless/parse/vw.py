"""Vowpal Wabbit's text format: read by the compiled reader (sparse_text.py), line by line where
it leaves a chunk."""
from typing import Sequence

from .records import DeadLetter, ExampleBlock
from .rows import Builder, compiled_first, one_line, parse_each
from .spec import BadRecord, RecordSpec, as_float


def parse_vw(spec: RecordSpec, source: str, items: Sequence[tuple[int, bytes | str | None]]
             ) -> tuple[ExampleBlock, list[DeadLetter]]:
    """VW text: label [importance] ['tag]|namespace feature[:value] ... |namespace ..."""
    return compiled_first("vw", spec, source, items, vw_lines)


def vw_lines(spec: RecordSpec, source: str, items: Sequence[tuple[int, bytes | str | None]]
             ) -> tuple[ExampleBlock, list[DeadLetter]]:
    """parse_vw, a line at a time."""
    b = Builder(spec, source)

    def one(line):
        head, bar, rest = one_line(line).partition("|")
        if not bar:
            raise BadRecord("no '|' feature section")
        tokens = head.split()
        if not tokens or tokens[0].startswith("'"):  # VW's unlabeled example: no label, a tag
            if spec.require_label:
                raise BadRecord("missing label")
            label, tokens = float("nan"), [None, *tokens]
        else:
            label = spec.label_value(tokens[0])
        weight, tag = 1.0, None
        for token in tokens[1:]:
            if token.startswith("'"):
                tag = token[1:]
            elif weight == 1.0 and tag is None:
                weight = as_float(token, "importance weight")
            else:
                tag = token
        features = []
        for section in ("|" + rest).split("|")[1:]:
            if not section or section[0].isspace():
                namespace, names = "", section.split()
            else:
                namespace, *names = section.split()
                namespace = namespace.split(":")[0]
            for token in names:
                name, sep, value = token.partition(":")
                full = f"{namespace}^{name}" if namespace else name
                features.append((full, as_float(value, "feature", full) if sep else 1.0))
        return label, features, weight, tag

    parse_each(b, items, one)
    return b.block(), b.dead
