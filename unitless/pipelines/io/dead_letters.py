"""What a source refuses: its dead letters written durably before the block after them goes
on, and the tag every step's dead-letter output carries."""
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics
import pyarrow as pa

from ...connectors.sinks import open_sink
from ...parse.records import DeadLetter, ExampleBlock, dead_letter_table

DEAD = "dead_letter"  # the tag of every step's dead-letter output


class SourceDeadLetters:
    """A source's dead-letter sink: writes what a block refused, durably, except what a resumed
    run already wrote (at or before ``logged_through[source]``); counts it."""

    def __init__(self, target: Optional[str], kafka_settings: Optional[Mapping[str, Any]],
                 logged_through: Optional[Dict[str, int]]) -> None:
        self.sink = open_sink(target, "jsonl", "dead letters", kafka_settings)
        self.logged_through = logged_through or {}
        self.bad = Metrics.counter("unitless", "bad_records")

    def write(self, source: Optional[str], dead: List[DeadLetter]) -> Optional[pa.Table]:
        """The dead letters as a table (None when there are none), durable in the sink."""
        logged = self.logged_through.get(source, -1)  # type: ignore[arg-type]  # (None: no source)
        dead = [d for d in dead if d.position > logged]
        if not dead:
            return None
        self.bad.inc(len(dead))
        table = dead_letter_table(dead)
        self.sink.write(table)
        self.sink.flush()
        return table

    def close(self) -> None:
        self.sink.close()


def hand_on(block: ExampleBlock, dead: List[DeadLetter],
            check: Optional[Callable[[ExampleBlock], list]], dead_letters: SourceDeadLetters,
            source: Optional[str]) -> Iterator[Any]:
    """A parsed block's outputs: the rows ``check`` refuses join its dead letters, which are
    written (durably) and output first; then the rest of the block, without its raw records."""
    block, refused = block.screen(check(block) if check else [])
    table = dead_letters.write(source, dead + refused)
    if table is not None:
        yield beam.pvalue.TaggedOutput(DEAD, table)
    if len(block):
        block.raw = None
        yield block
