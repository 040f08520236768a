"""Files, and the user's own records, in: ExampleBlocks and their dead letters."""
import apache_beam as beam
from apache_beam.metrics import Metrics

from ...connectors.files import read_file
from ...parse.jsonl import parse_records
from .dead_letters import SourceDeadLetters, hand_on


class ReadFiles(beam.DoFn):
    """File path -> ExampleBlocks; what it refuses goes to the dead letters (see the module).

    ``check(block)`` names the rows to refuse, [(row, reason)]; they become dead letters here,
    where the raw records are at hand, and blocks travel on without them.

    With ``spans`` (a run that reads one file), each block carries the span of lines or rows it
    was read from, the file's first from its start: a model then learns each block as it
    arrives, when it comes in order (see ``ordering.InOrder``), instead of holding the file in Beam
    state until the end of the input. Several files get none: their blocks wait, so that
    files are learned in the order of their names on every runner.
    """

    def __init__(self, fmt, spec, chunk_size, check, dead_letter, kafka_settings=None,
                 logged_through=None, spans=False):
        self.fmt, self.spec, self.chunk_size, self.check = fmt, spec, chunk_size, check
        self.dead_letter, self.kafka_settings = dead_letter, kafka_settings
        self.logged_through, self.spans = logged_through, spans
        self.blank = Metrics.counter("unitless", "blank_lines")

    def setup(self):
        self.dead = SourceDeadLetters(self.dead_letter, self.kafka_settings, self.logged_through)

    def teardown(self):
        self.dead.close()

    def process(self, path):
        start = 0  # of the lines or rows read, not yet in a block handed on
        for block, dead in read_file(path, self.fmt, self.spec, self.chunk_size):
            self.blank.inc(block.blank_lines)
            if self.spans and len(block):
                block.span = (start, int(block.positions[-1]))
                start = block.span[1] + 1
            yield from hand_on(block, dead, self.check, self.dead, path)


class ParseRecords(beam.DoFn):
    """A batch (list) of the user's own records (dicts, ``beam.Row``s) -> an ExampleBlock
    without a source (``parse_records``); records that cannot be read go to the dead letters
    with the reason, as JSON."""

    def __init__(self, spec, check, dead_letter, kafka_settings=None):
        self.spec, self.check = spec, check
        self.dead_letter, self.kafka_settings = dead_letter, kafka_settings

    def setup(self):
        self.dead = SourceDeadLetters(self.dead_letter, self.kafka_settings, None)

    def teardown(self):
        self.dead.close()

    def process(self, records):
        block, dead = parse_records(self.spec, None, list(enumerate(records)))
        yield from hand_on(block, dead, self.check, self.dead, None)
