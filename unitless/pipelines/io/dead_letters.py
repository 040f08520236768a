"""What a source refuses: its dead letters written durably before the block after them goes
on, and the tag every step's dead-letter output carries."""
import apache_beam as beam
from apache_beam.metrics import Metrics

from ...connectors.sinks import open_sink
from ...parse.records import dead_letter_table

DEAD = "dead_letter"  # the tag of every step's dead-letter output


class SourceDeadLetters:
    """A source's dead-letter sink: writes what a block refused, durably, except what a resumed
    run already wrote (at or before ``logged_through[source]``); counts it."""

    def __init__(self, target, kafka_settings, logged_through):
        self.sink = open_sink(target, "jsonl", "dead letters", kafka_settings)
        self.logged_through = logged_through or {}
        self.bad = Metrics.counter("unitless", "bad_records")

    def write(self, source, dead):
        """The dead letters as a table (None when there are none), durable in the sink."""
        logged = self.logged_through.get(source, -1)
        dead = [d for d in dead if d.position > logged]
        if not dead:
            return None
        self.bad.inc(len(dead))
        table = dead_letter_table(dead)
        self.sink.write(table)
        self.sink.flush()
        return table

    def close(self):
        self.sink.close()


def hand_on(block, dead, check, dead_letters, source):
    """A parsed block's outputs: the rows ``check`` refuses join its dead letters, which are
    written (durably) and output first; then the rest of the block, without its raw records."""
    block, refused = block.screen(check(block) if check else [])
    table = dead_letters.write(source, dead + refused)
    if table is not None:
        yield beam.pvalue.TaggedOutput(DEAD, table)
    if len(block):
        block.raw = None
        yield block
