"""Delayed outcomes over files (``--labels``): examples served without a label, their labels in
another file in another order, joined by id; the final models equal a plain run over the joined
records in label order, bit for bit, and the bad records are exactly the dead letters."""
import json

import numpy as np
import pytest

from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.labels import by_id
from unitless.labels import call_log, join as label_join
from unitless.parse.jsonl import parse_jsonl
from unitless.parse.spec import RecordSpec

from tests.helpers.commands import dead_letters, train
from tests.helpers.killing import final_models
from tests.helpers.labels import JOINED, assert_joined, write_join
from tests.helpers.ordered import KEYS
from tests.helpers.runners import runner_args


@pytest.mark.parametrize("runner", ["fnapi", "prism"])
@pytest.mark.parametrize("features_name", ["features.csv", "z-features.csv"])
def test_labels_joined_by_id_learn_as_the_joined_records_in_label_order(tmp_path, runner,
                                                                       features_name):
    """(The files' blocks all wait for the end of the input and are handed on by file name:
    "features.csv" serves every example before its label comes, "z-features.csv" comes after
    the labels, which wait for their features.)"""
    features, labels, reference, bad = write_join(tmp_path, features_name)
    joined = train(tmp_path / "joined", "--input", features, *JOINED, "--labels", str(labels),
                   *runner_args(runner))
    plain = train(tmp_path / "plain", "--input", reference, *JOINED)
    assert_joined(joined, plain, {str(labels)}, bad)


def test_examples_never_labeled_are_learned_with_the_expired_label_at_the_end(tmp_path):
    """--expired-label -1 over files: the 30 examples never labeled expire at the end of the
    input and are learned with -1 after their models' labels, in the order they were served;
    the accounting counts them (a prediction without a record read for it)."""
    features, labels, reference, bad = write_join(tmp_path, "z-features.csv")
    joined_ids = {line.split(",")[0] for line in reference.read_text().splitlines()[1:]}
    never = [line for line in features.read_text().splitlines()[1:]
             if line.split(",")[0] not in joined_ids]
    with open(reference, "a") as f:
        f.writelines(f"{line},-1\n" for line in never)
    joined = train(tmp_path / "joined", "--input", features, *JOINED, "--labels", str(labels),
                   "--expired-label", "-1")
    got, want = final_models(KEYS, joined / "models"), final_models(KEYS, str(
        train(tmp_path / "plain", "--input", reference, *JOINED) / "models"))
    for key in KEYS:
        assert got[key][0].equals(want[key][0]) and got[key][1] == want[key][1]
    expired = [r for r in read_output(str(joined / "pred")).to_pylist()
               if not r["served"] and r["source"] == str(features)]
    assert sorted(r["id"] for r in expired) == sorted(line.split(",")[0] for line in never)
    assert len(never) == 30 and all(r["label"] == -1 for r in expired)


def test_what_labels_cannot_be_used_with_is_refused_in_one_line(tmp_path, capsys):
    features, labels, _, _ = write_join(tmp_path, "features.csv")
    for more, said in ((["--model-ttl", "1h"], "--labels cannot be used with --model-ttl yet: a "
                        "model leaving state would leave its join's share"),
                       (["--shards", "2", "--feedback-topic", "kafka://localhost:1/t"],
                        "--labels cannot be used with --shards yet: a model's labels are kept"),
                       (["--labels", str(features)], "a file given to --labels is an input too")):
        code = main(["train", "--input", str(features), "--id-column", "id", "--labels",
                     str(labels), *more, "--model-dir", str(tmp_path / "m")])
        assert code == 2
        assert said in capsys.readouterr().err
    code = main(["train", "--input", str(features), "--id-column", "id", "--label-wait", "1h"])
    assert code == 2
    assert "--label-wait and --expired-label are for delayed labels: pass --labels too" in (
        capsys.readouterr().err)
    code = main(["train", "--input", str(features), "--labels", str(labels)])
    assert code == 2
    assert "--labels joins labels to examples by id: pass --id-column" in capsys.readouterr().err
    as_json = tmp_path / "labels.jsonl"
    as_json.write_text('{"id": "e-1", "key": "k0", "label": 1}\n')
    bare = tmp_path / "bare.csv"
    bare.write_text("id,key\ne-1,k0\n")
    for more, said in (([str(as_json)], "--labels files are jsonl and the inputs csv"),
                       ([str(bare)], "bare.csv: column 'label' not in its columns"),
                       ([str(labels), "--id-column", "ident"], "column 'ident' not in"),
                       ([str(labels), "--label-wait", "8d"], "--label-wait wants a duration "
                        "above 0 and at most 7d, got '8d'"),
                       ([str(labels), "--label-wait", "1h"], "--label-wait measures the "
                        "records' own time, which Kafka records carry and files do not"),
                       ([str(labels), "--expired-label", "7"], "--expired-label '7': label "
                        "7.0 is not a logistic label")):
        code = main(["train", "--input", str(features), "--id-column", "id", "--labels", *more])
        assert code == 2
        assert said in capsys.readouterr().err



def source_block(source, *records, first=1):
    """Records (JSON lines) of ``source`` as a block, at positions ``first`` on."""
    items = [(first + i, line) for i, line in enumerate(records)]
    parsed, dead = parse_jsonl(RecordSpec(id="id", bits=10, require_label=False), source, items)
    assert dead == []
    return parsed


def serve(join, block, served, scores):
    """``join.features`` of a features block whose examples ``served`` model "" served with
    ``scores``."""
    return join.features(block.source, block.positions, block.keys.to_pylist(),
                         block.event_times, [("", served, np.asarray(scores))])


def test_a_models_labels_wait_behind_one_whose_features_have_not_come():
    """``LabelJoin`` alone: label order is kept whatever order features come in; a second
    label, a second features record and a label never served are dead letters."""
    join = label_join.LabelJoin()
    labels = source_block("labels", '{"id": "b", "label": 1}', '{"id": "a", "label": -1}',
                  '{"id": "b", "label": -1}', '{"id": "z", "label": 1}', '{"id": "y"}',
                  '{"label": 1}', '{"id": "c", "label": 1}')
    joined, dead = join.labels(labels)  # (b's features have not come: all wait)
    assert joined == [] and [(d.position, d.reason) for d in dead] == [
        (5, label_join.NO_LABEL), (6, label_join.NO_ID)]
    # a features record that carries its own label is learned as it is: its id counts as
    # learned (its label, c's, later is a second one)
    join.labeled("", source_block("features", '{"id": "c", "label": 1, "x": 1.0}'))
    served = source_block("features", '{"id": "a", "x": 1.0}', '{"id": "a", "x": 2.0}', first=2)
    kept, dead = join.screen("", served)
    assert kept.ids.to_pylist() == ["a"] and [d.reason for d in dead] == [
        label_join.SECOND_FEATURES]
    assert serve(join, served, kept, [[0.5]]) == ([], [])  # (behind b)
    more = source_block("features", '{"id": "b", "x": 3.0}', first=4)
    joined, dead = serve(join, more, more, [[-2.0]])
    (key, block, scores, expired), = joined
    assert key == "" and not expired
    assert block.ids.to_pylist() == ["b", "a"] and block.labels.tolist() == [1.0, -1.0]
    assert block.source == "labels" and block.positions.tolist() == [1, 2]
    assert block.values.tolist() == [1.0, 3.0, 1.0, 1.0]  # (bias, x) of b, then of a
    assert scores.tolist() == [[-2.0], [0.5]]
    assert [d.reason for d in dead] == [label_join.SECOND_LABEL]
    assert join.holds("")  # (z's label waits, and c's behind it)
    assert join.nbytes > 0
    assert join.take_counts() == dict(waiting=0, expired=0, expired_learned=0, replayed=0)
    joined, dead = join.end("")
    assert joined == [] and [(d.position, d.reason) for d in dead] == [
        (4, label_join.NEVER_SERVED), (7, label_join.SECOND_LABEL)]
    assert not join.holds("")


def timed_block(source, first, *records):
    """``source_block`` with record times: records (id, time, label or None)."""
    block = source_block(source, *(json.dumps({"id": i, **({} if y is None else {"label": y}),
                                               "x": 1.0}) for i, _, y in records), first=first)
    block.event_times = np.array([t for _, t, _ in records], dtype=np.float64)
    return block


class Persisted:
    """A join as the learning step keeps it: after every call its log is persisted (a list for
    Beam's bag) and, with ``reread``, the join is rebuilt from it, as a worker that lost it
    from memory does."""

    def __init__(self, join, reread, snapshot_after=None, snapshot_part=None):
        self.join, self.reread, self.bag, self.most_parts = join, reread, [], 0
        if snapshot_after is not None:
            join.log.SNAPSHOT_AFTER = snapshot_after
        if snapshot_part is not None:
            join.log.SNAPSHOT_PART = snapshot_part

    def __getattr__(self, call):
        def persisted(*args):
            out = getattr(self.join, call)(*args)
            clear, entries = self.join.log_entries()
            if clear:
                self.bag.clear()
            self.bag += entries
            parts = [entry for entry in entries if entry[8:10] == call_log._SNAPSHOT_PART]
            assert all(len(part) <= self.join.log.SNAPSHOT_PART + 14 for part in parts)
            self.most_parts = max(self.most_parts, len(parts))
            if self.reread:
                counts = self.join.counts
                self.join = label_join.LabelJoin.rebuild(list(reversed(self.bag)))
                self.join.counts = counts
            return out
        return persisted


@pytest.mark.parametrize("reread,snapshot_after,snapshot_part", [
    (False, None, None), (True, None, None), (True, -1 << 30, None), (True, -1 << 30, 100)])
def test_what_waits_longer_than_the_label_wait_expires_on_record_time(reread, snapshot_after,
                                                                     snapshot_part):
    """``LabelJoin`` with a wait of 10 s: an example and its label join when their times are at
    most 10 s apart, whichever comes first; an example whose label has not come once the
    labels' clock is 10 s past it expires (here learned with the expired label, at its expiry
    time's place among its model's labels), and a label whose example has not come once the
    features' clock is 10 s past it is a dead letter. The same when the join is rebuilt from
    what it persisted after every call (its calls replayed, or its snapshots, in parts of at
    most ``snapshot_part`` bytes)."""
    join = Persisted(label_join.LabelJoin(wait=10.0, expired_label=-1.0), reread,
                     snapshot_after, snapshot_part)

    def features(block):
        return serve(join, block, block, np.zeros((len(block), 1)))

    def learned(joined):
        return [(block.ids.to_pylist(), block.labels.tolist(), expired)
                for _, block, _, expired in joined]

    assert features(timed_block("f/0", 1, ("a", 0, None), ("b", 1, None), ("c", 2, None),
                          ("d", 30, None), ("e", 31, None))) == ([], [])
    joined, dead = join.labels(timed_block("l/0", 1, ("a", 5, 1), ("x", 6, 1), ("c", 13, 1),
                                     ("e", 29, -1)))
    # b and c expire as the labels' clock passes 11 and 12 (c's label at 13 is too late)
    assert learned(joined) == [(["a"], [1.0], False), (["b", "c"], [-1.0, -1.0], True),
                               (["e"], [-1.0], False)]
    assert [(d.position, d.reason) for d in dead] == [(2, label_join.NEVER_SERVED),
                                                      (3, label_join.LATE_LABEL)]
    assert joined[1][1].source == "f/0" and joined[1][1].positions.tolist() == [2, 3]
    assert joined[1][1].event_times.tolist() == [11.0, 12.0]  # (when they expired)
    # labels first: g's waits for its features, and the labels behind it (d expires meanwhile,
    # at 40, and takes its place behind g's label, at 40, before h's, at 41)
    assert join.labels(timed_block("l/0", 5, ("g", 40, 1), ("h", 41, 1), ("d", 55, 1))) == ([], [])
    joined, dead = features(timed_block("f/0", 6, ("g", 45, None), ("h", 60, None)))
    assert learned(joined) == [(["g"], [1.0], False), (["d"], [-1.0], True)]
    # h's features came 19 s after its label: the label expired once the features' clock
    # passed 51, and d's label came after d had expired
    assert [(d.position, d.reason) for d in dead] == [(6, label_join.NEVER_SERVED),
                                                      (7, label_join.LATE_LABEL)]
    assert join.take_counts() == dict(waiting=1, expired=3, expired_learned=3, replayed=0)
    joined, dead = join.end("")
    assert learned(joined) == [(["h"], [-1.0], True)] and dead == []
    assert join.take_counts() == dict(waiting=-1, expired=1, expired_learned=1, replayed=0)
    assert join.most_parts > 1 if snapshot_part else join.most_parts <= 1


def test_a_join_resumed_after_its_end_learns_and_refuses_nothing_again(tmp_path):
    """--resume over the same files once a joined run has ended: every record is replayed (its
    models' checkpoints keep what they learned, judged and served), nothing is learned, served
    or refused again, and the models are unchanged."""
    features, labels, _, _ = write_join(tmp_path, "features.csv")
    more = ("--labels", str(labels), "--checkpoint-every", "50")
    joined = train(tmp_path / "joined", "--input", features, *JOINED, *more)
    before = final_models(KEYS, joined / "models")
    predictions = read_output(str(joined / "pred")).num_rows
    dead = read_output(str(joined / "dead")).num_rows
    train(tmp_path / "joined", "--input", features, *JOINED, *more, "--resume")
    after = final_models(KEYS, joined / "models")
    for key in KEYS:
        assert after[key][0].equals(before[key][0]) and after[key][1:] == before[key][1:]
    assert read_output(str(joined / "pred")).num_rows == predictions
    assert read_output(str(joined / "dead")).num_rows == dead


# the case: 300 examples a second apart, each label 3 s after its example
TIMED = ("--time-column", "t", "--label-wait", "10s", *JOINED)


def write_timed(directory, features_name="features.csv", order="ascending", labels_more=()):
    """Features and labels files for 300 examples a second apart over KEYS, each label 3 s
    after its example, the features in time ``order`` ("ascending", "descending" or
    "shuffled"), with ``labels_more`` [(id, key, time text, label)] among the labels; and the
    reference, the joined records in time order. Returns (features, labels, reference)."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(300):
        a, b = rng.normal() * 1e3, rng.normal() * 1e-2
        label = 1 if a / 1e3 + b / 1e-2 + rng.normal() > 0 else -1
        rows.append((f"e-{i}", KEYS[rng.integers(len(KEYS))], 1000.0 + i, a, b, label))
    written = {"ascending": rows, "descending": rows[::-1],
               "shuffled": [rows[i] for i in rng.permutation(len(rows))]}[order]
    features, labels = directory / features_name, directory / "labels.csv"
    features.write_text("id,key,t,a,b\n" + "".join(
        f"{i},{k},{t},{a},{b}\n" for i, k, t, a, b, _ in written))
    records = [(i, k, str(t + 3), y) for i, k, t, _, _, y in rows]
    for at, record in labels_more:
        records.insert(at, record)
    labels.write_text("id,key,t,label\n" + "".join(f"{','.join(map(str, r))}\n" for r in records))
    reference = directory / "reference.csv"
    reference.write_text("id,key,t,a,b,label\n" + "".join(
        f"{i},{k},{t + 3},{a},{b},{y}\n" for i, k, t, a, b, y in rows))
    return features, labels, reference


def assert_learned_as(out, reference, dead):
    """The run in ``out`` learned every example of ``reference`` as a plain run over it does
    (its models bit for bit), and its dead letters are exactly ``dead`` ({reason: count})."""
    got = final_models(KEYS, out / "models")
    want = final_models(KEYS, train(out.parent / f"{out.name}-plain", "--input", reference,
                                    *JOINED, "--time-column", "t") / "models")
    for key in KEYS:
        assert got[key][0].equals(want[key][0]) and got[key][1] == want[key][1]
    rows = read_output(str(out / "pred")).to_pylist()
    assert sum(r["served"] for r in rows) == sum(not r["served"] for r in rows) == 300
    reasons = [d["reason"] for d in dead_letters(out)]
    assert {reason: reasons.count(reason) for reason in set(reasons)} == dead


@pytest.mark.parametrize("features_name,order,runner", [
    (name, order, "fnapi") for name in ("features.csv", "z-features.csv")
    for order in ("descending", "shuffled")] + [("z-features.csv", "shuffled", "prism")])
def test_a_files_join_does_not_depend_on_the_order_of_its_records(tmp_path, features_name,
                                                                  order, runner):
    """A features file in descending (or no) time order, its labels 3 s after each example:
    every label joins its example (the join takes a bounded input's records in time order,
    not trusting a file's order for its clocks), as a plain run over the joined records in
    time order learns them; nothing is a dead letter. (Before: 15 of 300 learned, 285 "whose
    features never came".)"""
    features, labels, reference = write_timed(tmp_path, features_name, order)
    out = train(tmp_path / "joined", "--input", features, "--labels", labels, *TIMED,
                *runner_args(runner))
    assert_learned_as(out, reference, {})


def test_a_label_dated_far_ahead_is_refused_and_expires_nothing(tmp_path):
    """A label dated 9999-12-31 and one at 1e300 among a file's labels: each is a dead letter
    for its time (beyond --max-time-skew after the reader's clock), and every other label
    joins. (Before: the labels' clock jumped there, and every example waiting expired.)"""
    far = [(100, ("e-5", KEYS[0], "9999-12-31T00:00:00", 1)), (150, ("e-6", KEYS[0], "1e300", 1))]
    features, labels, reference = write_timed(tmp_path, labels_more=far)
    out = train(tmp_path / "joined", "--input", features, "--labels", labels, *TIMED)
    assert_learned_as(out, reference, {label_join.AHEAD_OF_CLOCK: 2})
    # a bound that lets 9999 through: the file's records are taken in time order, so that
    # label comes last, after every other has joined; e-5's features did not come within the
    # wait of it
    out = train(tmp_path / "wide", "--input", features, "--labels", labels, *TIMED,
                "--max-time-skew", "100000000d")
    assert_learned_as(out, reference, {label_join.AHEAD_OF_CLOCK: 1,
                                       label_join.NEVER_SERVED: 1})


def test_a_time_ordered_files_join_resumed_after_its_end_does_nothing_again(tmp_path):
    """--resume over the same files once a time-ordered join has ended: every record is
    replayed, nothing is learned, served or refused again, the models are unchanged."""
    features, labels, reference = write_timed(tmp_path, order="shuffled", labels_more=[
        (7, ("e-9", KEYS[1], "1e300", 1))])
    more = ("--labels", labels, "--checkpoint-every", "50", *TIMED)
    out = train(tmp_path / "joined", "--input", features, *more)
    before = final_models(KEYS, out / "models")
    train(out, "--input", features, *more, "--resume")
    after = final_models(KEYS, out / "models")
    for key in KEYS:
        assert after[key][0].equals(before[key][0]) and after[key][1:] == before[key][1:]
    assert_learned_as(out, reference, {label_join.AHEAD_OF_CLOCK: 1})


def test_on_a_stream_a_record_dated_far_ahead_moves_no_clock():
    """``LabelJoin`` as a stream takes records (in the order they come): a label dated a year
    ahead of the reader's clock ``now`` is a dead letter, and the labels after it join their
    examples; a features record so dated is refused before it is served. Without the bound
    that label's time expires every example waiting, and the labels after it wait behind it
    (the hazard the bound prevents)."""
    now = 1e6

    def run(max_skew):
        join = label_join.LabelJoin(wait=10.0, max_skew=max_skew)
        block = timed_block("f/0", 1, *((f"e-{i}", now - 100 + i, None) for i in range(20)),
                            ("late", now + 3e7, None))
        kept, dead = join.refuse_ahead(block, now)
        assert serve(join, kept, kept, np.zeros((len(kept), 1))) == ([], [])
        joined, more = join.labels(timed_block(
            "l/0", 1, ("e-0", now - 97, 1), ("e-1", now + 3e7, 1),
            *((f"e-{i}", now - 97 + i, 1) for i in range(2, 20))), now)
        learned = [i for _, block, _, _ in joined for i in block.ids.to_pylist()]
        assert join.take_delays() == pytest.approx([3.0] * len(learned))  # (label_delay_ms)
        return dead + more, learned, join.take_counts()["expired"]
    dead, learned, expired = run(300.0)
    assert [(d.source, d.position, d.reason) for d in dead] == [
        ("f/0", 21, label_join.AHEAD_OF_CLOCK), ("l/0", 2, label_join.AHEAD_OF_CLOCK)]
    # (e-1, whose label was refused, expires as the labels' clock passes its wait)
    assert learned == ["e-0", *(f"e-{i}" for i in range(2, 20))] and expired == 1
    assert run(None) == ([], ["e-0"], 19)


def test_a_time_skew_without_a_wait_or_above_nothing_is_refused_in_one_line(tmp_path, capsys):
    features, labels, _ = write_timed(tmp_path)
    base = ["train", "--input", str(features), "--id-column", "id", "--time-column", "t",
            "--model-dir", str(tmp_path / "m")]
    for more, said in ((["--max-time-skew", "5m"], "--max-time-skew bounds the record times "
                        "that --label-wait measures: pass --labels and --label-wait too"),
                       (["--labels", str(labels), "--max-time-skew", "5m"], "pass --labels and "
                        "--label-wait too"),
                       (["--labels", str(labels), "--label-wait", "10s", "--max-time-skew", "0"],
                        "--max-time-skew wants a duration above 0, got '0'"),
                       (["--labels", str(labels), "--label-wait", "10s", "--max-time-skew",
                         "soon"], "--max-time-skew wants a duration such as 90s")):
        assert main([*base, *more]) == 2
        assert said in capsys.readouterr().err


def test_a_time_ordered_join_takes_a_bounded_input_once():
    """``joined_in_time_order`` judges every record against clocks that the records before it
    in time moved: a second call, whose records may be older than those clocks, fails."""
    join = label_join.LabelJoin(wait=10.0, in_time_order=True)
    block = timed_block("f/0", 1, ("a", 5.0, None), ("b", 1.0, None))
    features = [("f/0", block.positions, block.keys.to_pylist(), block.event_times,
                 [("", block, np.zeros((2, 1)))])]
    joined, dead = join.joined_in_time_order(features, [timed_block("l/0", 1, ("b", 3.0, 1))],
                                             None)
    assert [b.ids.to_pylist() for _, b, _, _ in joined] == [["b"]] and dead == []
    with pytest.raises(RuntimeError, match="took its records in two parts"):
        join.joined_in_time_order([], [timed_block("l/0", 2, ("a", 6.0, 1))], None)


def test_a_bounded_join_judges_each_id_by_its_own_records():
    """``labels.by_id.judge``, the rules a bounded input's join applies per model key and id
    (wait 3): the first label within the wait joins, those before it never can, those after
    are seconds; without one, the labels after the expiry are late; ids closed before a
    resume keep their labels out."""
    f_group, f_time = [1, 2, 6], [10.0, 10.0, 0.0]
    labels = [(3, 4.0), (1, 5.0), (1, 8.0), (4, 9.0), (5, 9.5), (1, 12.0), (2, 20.0), (2, 21.0)]
    outcome, joins, joined = by_id.judge(f_group, f_time, [g for g, _ in labels],
                                         np.array([t for _, t in labels]), 3.0,
                                         closed_group=[4, 5], closed_expired=[True, False])
    assert outcome.tolist() == [by_id.NEVER, by_id.NEVER, by_id.JOIN, by_id.LATE, by_id.SECOND,
                                by_id.SECOND, by_id.LATE, by_id.LATE]
    assert joins.tolist() == [-1, -1, 0, -1, -1, -1, -1, -1]
    assert joined.tolist() == [True, False, False]


def test_a_bounded_joins_closed_ids_are_checkpointed_as_columns_and_read_back():
    """The ids a bounded join closes (joined, expired) are checkpointed as columns
    (``ClosedIds.to_json``); a resumed run reads them, or an older checkpoint's [id, expired,
    time] lists, alike: a second features record for either id is then refused."""
    join = label_join.LabelJoin(wait=2.0, expired_label=0.0, in_time_order=True)
    block = timed_block("f/0", 1, ("a", 0.0, None), ("b", 0.5, None))
    features = [("f/0", block.positions, block.keys.to_pylist(), block.event_times,
                 [("", block, np.zeros((2, 1)))])]
    joined, dead = join.joined_in_time_order(features, [timed_block("l/0", 1, ("a", 1.0, 1))])
    assert dead == [] and len(list(joined)) == 2
    closed = join.resume_state("", {"f/0": 2})["closed"]
    assert closed == {"ids": ["a", "b"], "expired": [False, True], "times": [0.0, 0.5]}
    for saved in (closed, [["a", False, 0.0], ["b", True, 0.5]]):
        resumed = label_join.LabelJoin(wait=2.0, expired_label=0.0, in_time_order=True)
        resumed.restore("", {"rejoin": {"f/0": 2}, "waiting": {}, "labels": {"l/0": 1},
                             "closed": saved}, {"f/0": 2})
        again = timed_block("f/1", 1, ("a", 3.0, None), ("b", 3.0, None), ("c", 3.0, None))
        kept, refused = resumed.screen("", again)
        assert kept.ids.to_pylist() == ["c"] and [d.reason for d in refused] == [
            label_join.SECOND_FEATURES] * 2
        assert resumed.models[""].closed.one_by_one == {}  # (still columns)


def test_a_resumed_bounded_join_still_knows_ids_closed_long_before_its_clocks():
    """A bounded input's checkpoints keep every id its join closed, however far behind its
    clocks (a stream forgets them at twice the wait): a resumed run reads its files again and
    may read new ones dated earlier, whose second features record for an id joined before
    must be refused, not learned again."""
    join = label_join.LabelJoin(wait=2.0, expired_label=None, in_time_order=True)
    block = timed_block("f/0", 1, ("a", 0.0, None), ("b", 100.0, None))
    features = [("f/0", block.positions, block.keys.to_pylist(), block.event_times,
                 [("", block, np.zeros((2, 1)))])]
    labels = timed_block("l/0", 1, ("a", 1.0, 1), ("b", 101.0, 0))
    joined, dead = join.joined_in_time_order(features, [labels])
    assert dead == [] and sum(len(b) for _, b, _, _ in joined) == 2
    saved = join.resume_state("", {"f/0": 2})
    assert saved["closed"]["ids"] == ["a", "b"]
    resumed = label_join.LabelJoin(wait=2.0, expired_label=None, in_time_order=True)
    resumed.restore("", saved, {"f/0": 2, "l/0": 2})
    kept, refused = resumed.screen("", timed_block("f/1", 1, ("a", 1.5, None)))
    assert len(kept) == 0 and [d.reason for d in refused] == [label_join.SECOND_FEATURES]


def test_a_bounded_input_refuses_an_ids_later_features_record_whichever_file_holds_it():
    """Of two features records of an id in two files, the later in record time is the second
    one, refused, whichever file is served first (equal times: the later file's)."""
    join = label_join.LabelJoin(wait=5.0, in_time_order=True)
    a = timed_block("f/0", 1, ("x", 9.0, None), ("y", 1.0, None), ("z", 3.0, None))
    b = timed_block("f/1", 1, ("x", 7.0, None), ("y", 2.0, None), ("z", 3.0, None))
    firsts = join.firsts_in_time_order([a, b], None)
    (kept_a, dead_a), (kept_b, dead_b) = join.screen("", a, firsts), join.screen("", b, firsts)
    assert kept_a.ids.to_pylist() == ["y", "z"] and kept_b.ids.to_pylist() == ["x"]
    assert [(d.source, d.position, d.reason) for d in dead_a + dead_b] == [
        ("f/0", 1, label_join.SECOND_FEATURES), ("f/1", 2, label_join.SECOND_FEATURES),
        ("f/1", 3, label_join.SECOND_FEATURES)]


def test_a_bounded_join_learns_expired_examples_from_their_own_file():
    """An expired example learned with --expired-label names its own features file and line,
    whichever file the join's other examples came from."""
    join = label_join.LabelJoin(wait=2.0, expired_label=0.0, in_time_order=True)
    features = []
    for source in ("f/0", "f/1"):
        block = timed_block(source, 1, ("a" if source == "f/0" else "b", 0.0, None))
        features.append((source, block.positions, block.keys.to_pylist(), block.event_times,
                         [("", block, np.zeros((1, 1)))]))
    joined, dead = join.joined_in_time_order(features, [timed_block("l/0", 1, ("a", 1.0, 1))])
    assert dead == [] and [(b.source, b.ids.to_pylist(), b.labels.tolist(), expired)
                           for _, b, _, expired in joined] == [
        ("l/0", ["a"], [1.0], False), ("f/1", ["b"], [0.0], True)]
