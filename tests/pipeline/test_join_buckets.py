"""The join keyed by example id as a Beam step (``pipelines/join_buckets.py``) on the FnApiRunner
and Prism: a stream's served examples and labels, stamped by their reading order, spread over
buckets with their clocks, give each label and example the outcome ``by_id.judge`` gives it
over the whole input, each once, the joined examples with the scores they were served with;
and the step's metrics count them, its largest value written to state under 1 MiB."""
import math

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_stream import TestStream as Events  # (not "Test*": pytest)
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import GlobalWindow, TimestampedValue

from unitless.labels import by_id
from unitless.labels.reasons import LATE_LABEL, SECOND_FEATURES
from unitless.pipelines.join_buckets import DEAD, EXPIRED, JOINED, OWN, JoinById

from tests.helpers.runners import pipeline
from tests.unit.test_label_buckets import expected, stream

WAIT = 10.0


def joined_rows(answer):
    block, scores, came = answer
    return [("joined", block.source, int(p), s.tolist()) for p, s in zip(block.positions, scores)
            ] if not block.source.startswith("f/") else [("own", block.source, int(p), None)
                                                         for p in block.positions]


def expired_rows(answer):
    block, _, at = answer
    return [("expired", block.source, int(p), float(t)) for p, t in zip(block.positions, at)]


def dead_rows(dead):
    return [("dead", d.source, d.position, d.reason) for d in dead]


def ended(row, timestamp=beam.DoFn.TimestampParam):
    """(whether the answer came at the end of the input, not as the clocks moved, row)"""
    # (the end's timer's outputs are stamped at its time, in whole milliseconds)
    yield timestamp >= GlobalWindow().max_timestamp() - 1, row


def join_by_id_checked(p, streaming=False, seed=6):
    """Build on pipeline ``p``: a stream's blocks (``stream``), stamped in their reading order
    (``streaming``: the watermark moved past each as it is read), through ``JoinById`` over 5
    buckets, and the check that each record is answered once, as ``expected`` says. Returns
    the answers expected (but the examples that carried their own label)."""
    blocks = stream(seed, n=500, wait=WAIT, lag=15.0)
    labels, examples, seconds = expected(blocks, WAIT)
    features_of = {place: example for place, (o, example) in labels.items() if o == by_id.JOIN}
    want = sorted(
        [("joined", *place, [example[1], int(example[0][2:])])
         for place, example in features_of.items()]
        + [("dead", *place, reason) for place, (reason, _) in labels.items()
           if reason != by_id.JOIN]
        + [("expired", *place, t) for place, t in examples.items() if t != "joined"]
        + [("dead", *place, SECOND_FEATURES) for place in seconds], key=str)
    assert any(r[0] == "expired" for r in want) and math.isfinite(WAIT)
    # (the examples that carried their own label, answered joined as they are)
    own = sum(t == "joined" for t in examples.values()) - len(features_of)
    if streaming:
        test_stream = Events()
        for n, (kind, block) in enumerate(blocks):
            test_stream.add_elements([TimestampedValue((n, kind, block), n)])
            test_stream.advance_watermark_to(n + 0.5)
        stamped = p | test_stream.advance_watermark_to_infinity()
    else:
        created = p | beam.Create([(n, kind, block) for n, (kind, block) in enumerate(blocks)])
        stamped = created | beam.Map(lambda e: TimestampedValue(e, e[0]))
    inputs = {kind: stamped | f"Only {kind}" >> beam.Filter(lambda e, k=kind: e[1] == k)
              | f"Block {kind}" >> beam.Map(lambda e: e[2]) for kind in ("features", "labels")}
    out = inputs | JoinById(WAIT, buckets=5, sources={"features": ["f/0", "f/1"],
                                                      "labels": ["l/0"]})
    rows = ((out[JOINED] | "Joined" >> beam.FlatMap(joined_rows),
             out[OWN] | "Own" >> beam.FlatMap(joined_rows),
             out[EXPIRED] | "Expired" >> beam.FlatMap(expired_rows),
             out[DEAD] | "Dead" >> beam.FlatMap(dead_rows)) | beam.Flatten()
            | beam.ParDo(ended))

    def as_judged(actual):
        assert sum(r[0] == "own" for _, r in actual) == own
        got = sorted((r for _, r in actual if r[0] != "own"), key=str)
        assert len(got) == len(set(map(str, got)))  # (each answered once)
        assert got == want
        if streaming:  # (most examples expired as the clocks moved, not at the end)
            expired = [at_end for at_end, r in actual if r[0] == "expired"]
            assert sum(expired) < len(expired) / 4, (sum(expired), len(expired))

    assert_that(rows, as_judged)
    return want


@pytest.mark.parametrize("runner,streaming", [("fnapi", False), ("prism", False),
                                              ("prism", True)])
def test_join_by_id_answers_each_record_once_as_its_own_records_decide(runner, streaming):
    p = pipeline(runner, streaming)
    want = join_by_id_checked(p, streaming)
    result = p.run()
    result.wait_until_finish()
    found = {m.key.metric.name: m.committed for m in result.metrics().query(
        MetricsFilter().with_namespace("unitless"))["counters"]}
    assert found["examples_waiting_for_labels"] == 0  # (every start stopped by the end)
    assert found["examples_expired_without_label"] == sum(r[0] == "expired" for r in want)
    assert found["late_labels"] == sum(r[-1] == LATE_LABEL for r in want)
    sizes = {m.key.metric.name: m.committed for m in result.metrics().query(
        MetricsFilter().with_namespace("unitless"))["distributions"]}
    assert sizes["label_delay_ms"].count == sum(r[0] == "joined" for r in want)
    assert 0 < sizes["state_value_bytes"].max < 1 << 20
