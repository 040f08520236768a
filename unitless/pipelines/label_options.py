"""What ``--labels``, ``--label-wait``, ``--expired-label`` and ``--max-time-skew`` take, checked
against the rest of the run before it starts (``configure`` calls these; the join itself:
labels/)."""
from typing import TYPE_CHECKING, Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa

from ..connectors.files import record_columns
from ..connectors.kafka import KafkaTopic, is_kafka
from ..learner import check_examples, make_batch
from ..parse.spec import BadRecord, RecordSpec
from .inputs import resolve_inputs
from .options import duration

if TYPE_CHECKING:
    from .config import TrainConfig


def joined_labels(labels: Union[str, Sequence[str]], cfg: "TrainConfig",
                  given_format: Optional[str]) -> List[str]:
    """The label files or topic of ``--labels``, checked against the rest of the run (what the
    join of delayed outcomes does not do yet is refused in one line: docs/delayed-outcomes.md);
    sets ``cfg.label_sources``."""
    if isinstance(labels, str):
        labels = [labels]
    for option, on, why in (
            ("--shards", cfg.shards, "a model's labels are kept in order where its state is, "
             "which shards split over keys"),
            ("--model-ttl", cfg.model_ttl, "a model leaving state would leave its join's share "
             "(ids closed, labels judged) behind")):
        if on:
            raise ValueError(f"--labels cannot be used with {option} yet: {why} "
                             "(docs/delayed-outcomes.md)")
    if cfg.spec.id is None:
        raise ValueError("--labels joins labels to examples by id: pass --id-column")
    kafka = [is_kafka(str(x)) for x in [*labels, *(cfg.inputs or ())]]
    if any(kafka):
        if not all(kafka) or len(labels) > 1:
            raise ValueError("--labels reads one kafka:// topic when the input is a topic, and "
                             "files when it is files")
        topic = KafkaTopic.parse(labels[0]).topic
        if cfg.inputs and topic == KafkaTopic.parse(cfg.inputs[0]).topic:
            raise ValueError("--labels names the input's own topic: labels come on a topic of "
                             "their own")
        cfg.label_sources = frozenset([topic])
        return list(labels)
    files, fmt = resolve_inputs(labels, given_format)
    if cfg.inputs and set(files) & set(cfg.inputs):
        raise ValueError("a file given to --labels is an input too: "
                         f"{sorted(set(files) & set(cfg.inputs))[0]}")
    if cfg.inputs and fmt != cfg.format:
        raise ValueError(f"--labels files are {fmt} and the inputs {cfg.format}: read one format "
                         "per run")
    check_join_columns(cfg.spec, files, cfg.inputs or (), fmt)
    cfg.label_sources = frozenset(files)
    return files


def check_join_columns(spec: RecordSpec, labels: Iterable[str], inputs: Iterable[str],
                       fmt: str) -> None:
    """Refuse, before the run, labels files and inputs whose records lack a column the join
    needs (each of their records would be a dead letter, or a label would go to the model of
    no key), or whose id or model key column holds floats (the join compares them as text, and
    a float has no one text: 1 and 1.0). Each input needs the id column and, when given, the
    model key and time columns; each labels file those and the label column. Files whose
    format names no columns before its records (JSON lines) are checked record by record."""
    shared = [spec.id, spec.model_key, spec.time]
    needs = [*((path, [*shared, spec.label]) for path in labels),
             *((path, shared) for path in inputs)]
    for path, needed in needs:
        columns = record_columns(path, fmt, spec)
        if columns is None:
            continue
        for column in needed:
            if column is not None and column not in columns:
                raise ValueError(
                    f"{path}: column {column!r} not in its columns: with --labels, each input "
                    "needs the --id-column (and the --model-key-column and --time-column when "
                    "given), and each labels file those and the --label-column")
        for flag, column in (("--id-column", spec.id), ("--model-key-column", spec.model_key)):
            kind = columns.get(column)  # type: ignore[arg-type]  # (None: a column not given)
            if kind is not None and pa.types.is_floating(kind):
                raise ValueError(
                    f"{path}: column {column!r} ({flag}) holds floating-point numbers "
                    f"({kind}): --labels compares ids and model keys as text, and a float's "
                    "text is not one (1 or 1.0): write them as integers or text")


# seconds: what waits is held in worker memory and logged in Beam state (docs/delayed-outcomes.md)
MAX_LABEL_WAIT = 7 * 86400


def label_expiry(o: Mapping[str, Any], cfg: "TrainConfig"
                 ) -> Tuple[Optional[float], Optional[float]]:
    """(``--label-wait`` in seconds or None, ``--expired-label`` as the learner's label or
    None), checked."""
    wait = None
    if o["label_wait"] is not None:
        wait = duration(o["label_wait"], "--label-wait")
        if not 0 < wait <= MAX_LABEL_WAIT:
            raise ValueError(f"--label-wait wants a duration above 0 and at most 7d, got "
                             f"{o['label_wait']!r}")
        if not (is_kafka(str(cfg.labels[0])) or cfg.spec.time):
            raise ValueError("--label-wait measures the records' own time, which Kafka "
                             "records carry and files do not: pass --time-column, or files "
                             "are joined whole")
    label = o["expired_label"]
    if label is not None:
        try:
            label = cfg.spec.label_value(label)
        except BadRecord as err:
            raise ValueError(f"--expired-label {o['expired_label']!r}: {err}") from None
        batch = make_batch(np.array([0, 1]), np.array([0]), np.array([1.0]), np.array([label]),
                           np.array([1.0]))
        refused = check_examples(batch, 2, cfg.n_classes, cfg.loss)
        if refused:
            raise ValueError(f"--expired-label {o['expired_label']!r}: {refused[0][1]}")
    return wait, label


# seconds a record may be dated ahead of the reader's clock (--max-time-skew's default): beyond
# the clock differences of well-run machines, far below a wrong clock's years
MAX_TIME_SKEW = 300.0


def time_skew(value: Union[str, float, None], wait: Optional[float]) -> Optional[float]:
    """``--max-time-skew`` in seconds (``MAX_TIME_SKEW`` when not given) for a join with
    ``wait``, checked."""
    if wait is None:
        if value is None:
            return None
        raise ValueError("--max-time-skew bounds the record times that --label-wait measures: "
                         "pass --labels and --label-wait too")
    if value is None:
        return MAX_TIME_SKEW
    skew = duration(value, "--max-time-skew")
    if not skew > 0:
        raise ValueError(f"--max-time-skew wants a duration above 0, got {value!r}")
    return skew
