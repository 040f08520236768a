"""Everything a training or scoring run needs to know, in one validated object shared by the
`unitless` command and the Beam transforms (``unitless.beam``), independent of both.

Options have one name and one default each, in one table (options.py): the command's flag
``--label-column`` is the keyword ``label_column``. ``configure(**options)`` checks them all,
once, and returns a ``TrainConfig``; a bad option is a ValueError with a one-line reason.
"""
import os
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa

from ..connectors.files import expand_inputs, record_columns
from ..connectors.kafka import CLIENT_SETTING, KafkaTopic, is_kafka
from ..connectors.kafka_clients import choose
from ..connectors.storage import resolve
from ..learner import ALGORITHMS, LOSS_CODES, bias_index, check_examples, make_batch, new_state
from ..parse.formats import EXTENSIONS, FORMATS, OUTPUT_FORMATS, VALUE_FORMATS
from ..parse.spec import BadRecord, LabelMap, RecordSpec, check_column_names
from .options import TIME_UNITS, default, defaults

# the options' defaults by kind, from the one table of them (options.py)
READ_OPTIONS = defaults("read")
OUTPUT_OPTIONS = defaults("output")
LEARN_OPTIONS = defaults("learn")
HYPERPARAMETERS = tuple(defaults("hyperparameter"))
DELIMITER_NAMES = {"\\t": "\t", "tab": "\t", "\\s": " ", "space": " "}


@dataclass(kw_only=True)
class TrainConfig:
    """A run's options, checked and converted: ``configure`` makes it, and options.py says
    what each means and its default."""
    inputs: list
    format: str
    spec: RecordSpec                # how records are read: the read options
    algorithm: str
    loss: str
    n_classes: int
    hyperparameters: dict
    model_dir: str
    predictions: str
    output_format: str
    dead_letter: str
    checkpoint_every: int           # examples; 0: only at the end of the input
    checkpoint_seconds: float       # 0: off
    keep_checkpoints: int
    resume: bool
    overwrite: bool
    allow_hyperparameter_change: bool
    chunk_size: int
    log_every_seconds: float
    kafka_settings: dict            # the Kafka client's settings, and which client
    models_in_memory: int
    model_memory_mib: int
    shards: int                     # 0: unsharded (pipelines/sharded)
    max_delay: int
    feedback_topic: Optional[str]   # a kafka:// URL, with shards
    model_groups: int               # 0: a key of its own for each model key
    model_ttl: float                # seconds; 0: never
    serve_apart: bool
    publish_seconds: float
    max_staleness: float
    # delayed labels (labels/join), where the run has them
    labels: tuple = ()              # files or a topic
    label_sources: frozenset = frozenset()  # ... their paths, or the topic
    label_wait: Optional[float] = None  # seconds of record time; None: the end of the input
    expired_label: Optional[float] = None
    max_time_skew: Optional[float] = None

    @property
    def idle_seconds(self):
        """A quiet stream's models are checkpointed, and published when serving apart, after
        this long without an element (``LearnBlocks.idle``); 0: never."""
        times = [t for t in (self.checkpoint_seconds,
                             self.publish_seconds if self.serve_apart else 0) if t]
        return min(times, default=0.0)

    def is_labels(self, source):
        """Whether a block's source is one of ``labels``: a file, or a partition of the
        topic."""
        return source in self.label_sources or (
            source is not None and source.rpartition("/")[0] in self.label_sources)


# how long a scoring step goes without looking for a key's newer checkpoint (``score.py``)
REFRESH_SECONDS = default("refresh_seconds")


def names(value):
    """Column names given as 'a,b,c' or as a list: a tuple without blanks."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    return tuple(str(c).strip() for c in items if str(c).strip())


def classes(value):
    """classes: (number of classes, their names or ()): a count K (int or text), or names
    ('setosa,versicolor,virginica' or a list of them)."""
    if isinstance(value, bool):
        raise ValueError(f"classes wants a number of classes or their names, not {value!r}")
    if isinstance(value, int):
        count = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
        count = int(value)
    else:
        labels = tuple(c.strip() for c in (value.split(",") if isinstance(value, str)
                                           else map(str, value)))
        if len(labels) < 2 or not all(labels):
            raise ValueError(f"--classes wants a number of classes or two or more "
                             f"comma-separated names, got {value!r}")
        return len(labels), labels
    if count < 1:
        raise ValueError(f"--classes wants a positive number of classes, got {count}")
    return count, ()


DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(value, option):
    """Seconds of a duration given as a number of seconds or text with a unit: '90', '90s',
    '15m', '2h', '1.5d'; None: 0 (off)."""
    if value is None:
        return 0.0
    found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([smhd]?)\s*", str(value))
    if isinstance(value, bool) or found is None:
        raise ValueError(f"{option} wants a duration such as 90s, 15m, 2h or 1d, got {value!r}")
    return float(found[1]) * DURATION_UNITS[found[2]]


def kafka_settings(value, client="auto"):
    """Kafka client settings from a dict, or NAME=VALUE strings (numbers become numbers), with
    the client chosen (``--kafka-client``; "auto": see ``kafka_clients.choose``)."""
    if isinstance(value, dict):
        settings = dict(value)
    else:
        settings = {}
        for pair in value or ():
            name, sep, text = pair.partition("=")
            if not sep:
                raise ValueError(f"--kafka-config wants NAME=VALUE, got {pair!r}")
            settings[name.strip()] = int(text) if text.strip().lstrip("-").isdigit() else text
    if client not in (None, "auto"):
        settings[CLIENT_SETTING] = choose(client)  # (checked now, before any worker starts)
    return settings


def record_spec(options, scoring=False):
    """The RecordSpec of the reading options (READ_OPTIONS names), checked. A record without a
    label is an example to serve (or, ``scoring``, to score); a sharded model refuses it (it
    serves nothing yet)."""
    o = {**READ_OPTIONS, **options}
    delimiter = DELIMITER_NAMES.get(o["delimiter"], o["delimiter"])
    if not delimiter:
        raise ValueError("--delimiter cannot be empty")
    columns = list(names(o["columns"])) if o["columns"] is not None else None
    if columns is not None:
        check_column_names(columns, "--columns", "give each column a name of its own")
    roles = [(flag, o[name]) for flag, name in (
        ("--label-column", "label_column"), ("--id-column", "id_column"),
        ("--model-key-column", "model_key_column"), ("--weight-column", "weight_column"),
        ("--time-column", "time_column"))
        if o[name] is not None]
    for i, (flag, column) in enumerate(roles):
        if not str(column).strip():
            raise ValueError(f"{flag} names no column")
        for other, same in roles[:i]:
            if same == column:
                raise ValueError(f"{other} and {flag} both name column {column!r}: a column "
                                 "has one role")
    if not 1 <= int(o["bits"]) <= 32:
        raise ValueError(f"--bits wants 1..32, got {o['bits']}")
    if o["time_unit"] not in TIME_UNITS:
        raise ValueError(f"--time-unit wants one of {', '.join(TIME_UNITS)}, got "
                         f"{o['time_unit']!r}")
    positive = o["positive_label"]
    return RecordSpec(label=o["label_column"], id=o["id_column"], model_key=o["model_key_column"],
                      weight=o["weight_column"], time=o["time_column"],
                      time_unit=TIME_UNITS[o["time_unit"]], bits=int(o["bits"]),
                      bias=not o["no_bias"],
                      categorical=names(o["categorical_columns"]), delimiter=delimiter,
                      require_label=not scoring and int(o.get("shards") or 0) > 0,
                      header_needs_label=not scoring and not o.get("labels"), columns=columns,
                      header=not o["no_header"],
                      ignore=names(o["ignore_columns"]),
                      labels=LabelMap(None if positive is None else str(positive),
                                      classes(o["classes"])[1]))


def resolve_inputs(inputs, fmt=None):
    """(inputs, format): a kafka:// URL as is (format default jsonl), or the files that paths
    and globs name, each by its canonical name once (the same file spelled differently, or
    named twice, is one source, read once), with the format taken from their extensions when
    not given."""
    if isinstance(inputs, str):
        inputs = [inputs]
    if not inputs:
        raise ValueError("no input given")
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    if is_kafka(inputs[0]):
        if len(inputs) > 1:
            raise ValueError("read one Kafka topic per run, or files, not both")
        if fmt is not None and fmt not in VALUE_FORMATS:
            raise ValueError(f"Kafka messages cannot be {fmt}; choose one of: "
                             f"{', '.join(VALUE_FORMATS)}")
        return list(inputs), fmt or "jsonl"
    files = list(dict.fromkeys(resolve(f) for f in expand_inputs(inputs)))  # (each once)
    if fmt is None:
        formats = {}
        for path in files:
            name = path[:-3] if path.endswith(".gz") else path
            found = EXTENSIONS.get(os.path.splitext(name)[1].lower())
            if found is None:
                raise ValueError(f"cannot tell the format of {path} from its extension; pass "
                                 f"--format ({', '.join(FORMATS)})")
            formats.setdefault(found, path)
        if len(formats) > 1:
            raise ValueError("the inputs are of different formats (" + ", ".join(
                f"{path}: {found}" for found, path in formats.items()) + "); read one format "
                "per run")
        fmt = next(iter(formats))
    return files, fmt


def configure(inputs=None, scoring=False, **options):
    """A checked TrainConfig from options named as READ_OPTIONS, OUTPUT_OPTIONS, LEARN_OPTIONS
    and HYPERPARAMETERS (missing ones take their defaults; None hyperparameters are the
    algorithm's defaults). ``inputs`` (paths, globs or one kafka:// URL) may be None for a
    pipeline that gets its examples otherwise."""
    known = {*READ_OPTIONS, *OUTPUT_OPTIONS, *LEARN_OPTIONS, *HYPERPARAMETERS}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r}; options are: {', '.join(sorted(known))}")
    o = {**READ_OPTIONS, **OUTPUT_OPTIONS, **LEARN_OPTIONS, **options}
    spec = record_spec(o, scoring)
    fmt = o["format"]
    if inputs is not None:
        inputs, fmt = resolve_inputs(inputs, fmt)
    if spec.time and fmt in ("vw", "libsvm"):
        raise ValueError(f"--time-column names a field, and {fmt} records have none: use "
                         "jsonl, csv or parquet (or Kafka record timestamps)")
    if o["algorithm"] not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {o['algorithm']!r}; choose one of: "
                         f"{', '.join(sorted(ALGORITHMS))}")
    if o["loss"] not in LOSS_CODES:
        raise ValueError(f"unknown loss {o['loss']!r}; choose one of: {', '.join(LOSS_CODES)}")
    if o["output_format"] not in OUTPUT_FORMATS:
        raise ValueError(f"unknown output format {o['output_format']!r}; choose one of: "
                         f"{', '.join(OUTPUT_FORMATS)}")
    for name, low in (("chunk_size", 1), ("checkpoint_every", 0), ("keep_checkpoints", 1),
                      ("models_in_memory", 1), ("model_memory_mib", 1), ("shards", 0),
                      ("max_delay", 0), ("model_groups", 0)):
        if int(o[name]) < low:
            raise ValueError(f"--{name.replace('_', '-')} wants {low} or more, got {o[name]}")
    for name in ("checkpoint_seconds", "log_every"):
        if not float(o[name]) >= 0:
            raise ValueError(f"--{name.replace('_', '-')} wants 0 or more, got {o[name]}")
    spec_alg = ALGORITHMS[o["algorithm"]]
    hp = {}
    for name in HYPERPARAMETERS:
        if o.get(name) is None:
            continue
        if name not in spec_alg.hyperparameters and not (name == "quantile_tau"
                                                          and o["loss"] == "quantile"):
            raise ValueError(f"--{name.replace('_', '-')} does not apply to {o['algorithm']} "
                             f"(it takes: {', '.join(spec_alg.hyperparameters) or 'nothing'})")
        hp[name] = float(o[name])
    if spec_alg.matrices and spec.bits > 12:
        raise ValueError(f"{o['algorithm']} keeps d×d matrices: pass --bits 12 or less")
    n_classes = classes(o["classes"])[0]
    if n_classes > 1 and o["positive_label"] is not None:
        raise ValueError(f"--positive-label is for a binary task, not --classes {o['classes']}: "
                         "pass one of them")
    apart, publish_seconds, max_staleness = serving_apart(o)
    cfg = TrainConfig(
        inputs=inputs, format=fmt, spec=spec, algorithm=o["algorithm"], loss=o["loss"],
        n_classes=n_classes, hyperparameters=hp, model_dir=o["model_dir"],
        predictions=o["predictions"], output_format=o["output_format"],
        dead_letter=o["dead_letter"], checkpoint_every=int(o["checkpoint_every"]),
        checkpoint_seconds=float(o["checkpoint_seconds"]),
        keep_checkpoints=int(o["keep_checkpoints"]), resume=bool(o["resume"]),
        overwrite=bool(o["overwrite"]),
        allow_hyperparameter_change=bool(o["allow_hyperparameter_change"]),
        chunk_size=int(o["chunk_size"]), log_every_seconds=float(o["log_every"]),
        kafka_settings=kafka_settings(o["kafka_config"], o["kafka_client"]),
        models_in_memory=int(o["models_in_memory"]), model_memory_mib=int(o["model_memory_mib"]),
        shards=int(o["shards"]), max_delay=int(o["max_delay"]),
        feedback_topic=sharding_feedback(o, inputs), model_groups=int(o["model_groups"]),
        model_ttl=duration(o["model_ttl"], "--model-ttl"), serve_apart=apart,
        publish_seconds=publish_seconds, max_staleness=max_staleness)
    if cfg.overwrite and cfg.resume:
        raise ValueError("--overwrite starts over and --resume continues: pass one of them")
    if cfg.model_ttl and cfg.shards:
        raise ValueError("--model-ttl is for models without --shards (a sharded model's shards "
                         "keep their state)")
    if o["labels"]:
        cfg.labels = tuple(joined_labels(o["labels"], cfg, o["format"]))
        cfg.label_wait, cfg.expired_label = label_expiry(o, cfg)
        cfg.max_time_skew = time_skew(o["max_time_skew"], cfg.label_wait)
    elif o["label_wait"] is not None or o["expired_label"] is not None:
        raise ValueError("--label-wait and --expired-label are for delayed labels: pass "
                         "--labels too")
    elif o["max_time_skew"] is not None:
        time_skew(o["max_time_skew"], None)
    new_state(cfg.algorithm, 2, cfg.loss, cfg.n_classes, **hp)  # the learner's own checks
    return cfg


def serving_apart(o):
    """(whether examples are served apart from learning, ``--publish-seconds``,
    ``--max-staleness``), checked: apart with ``--labels`` always (docs/usage.md, "Serving
    apart from learning"), else with ``--serve-apart``."""
    apart = bool(o["serve_apart"] or o["labels"])
    if apart and int(o["shards"]) and not o["labels"]:  # (--labels: ``joined_labels`` says)
        raise ValueError("--serve-apart cannot be used with --shards yet")
    seconds = []
    for name in ("publish_seconds", "max_staleness"):
        value = duration(o[name], f"--{name.replace('_', '-')}")
        if not value > 0:
            raise ValueError(f"--{name.replace('_', '-')} wants a duration above 0, got "
                             f"{o[name]!r}")
        seconds.append(value)
    return (apart, *seconds)


def joined_labels(labels, cfg, given_format):
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


def check_join_columns(spec, labels, inputs, fmt):
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
            kind = columns.get(column)
            if kind is not None and pa.types.is_floating(kind):
                raise ValueError(
                    f"{path}: column {column!r} ({flag}) holds floating-point numbers "
                    f"({kind}): --labels compares ids and model keys as text, and a float's "
                    "text is not one (1 or 1.0): write them as integers or text")


# seconds: what waits is held in worker memory and logged in Beam state (docs/delayed-outcomes.md)
MAX_LABEL_WAIT = 7 * 86400


def label_expiry(o, cfg):
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


def time_skew(value, wait):
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


def sharding_feedback(o, inputs):
    """The feedback topic of a sharded run (None unsharded), its options checked: given, or
    beside a Kafka input's topic (<topic>.unitless-feedback on the same brokers)."""
    if not int(o["shards"]):
        if int(o["max_delay"]) or o["feedback_topic"]:
            raise ValueError("--max-delay and --feedback-topic are for a sharded model: pass "
                             "--shards too")
        return None
    if not ALGORITHMS[o["algorithm"]].shardable:
        raise ValueError(f"{o['algorithm']} cannot be split over feature shards; these can: "
                         f"{', '.join(sorted(a for a, s in ALGORITHMS.items() if s.shardable))}")
    if int(o["keep_checkpoints"]) < 2:
        raise ValueError("--shards keeps at least 2 checkpoints per shard (--keep-checkpoints): "
                         "a shard may be one checkpoint ahead of the others")
    topic = o["feedback_topic"]
    if topic is None and inputs and is_kafka(inputs[0]):
        topic = inputs[0].rstrip("/") + ".unitless-feedback"
    if not is_kafka(topic):
        raise ValueError("--shards passes each round's parts between a model's shards through "
                         "a Kafka topic: pass --feedback-topic kafka://host:port/topic")
    return topic


@dataclass(frozen=True)
class LearnerCheck:
    """The learner's checks on examples (``check_examples``), run where examples are read, so
    that what the learner would refuse goes to the dead letters with its raw record."""
    dim: int
    n_classes: int
    loss: str

    def __call__(self, block):
        return check_examples(block.batch(), self.dim, self.n_classes, self.loss, block.served)


def learner_check(cfg):
    return LearnerCheck(1 << cfg.spec.bits, cfg.n_classes, cfg.loss)


def new_learner(cfg):
    """A fresh learner state for this configuration."""
    return new_state(cfg.algorithm, 1 << cfg.spec.bits, cfg.loss, cfg.n_classes,
                     bias_index(cfg.spec.bits) if cfg.spec.bias else -1, **cfg.hyperparameters)


def check_resume(cfg, meta, path):
    """Raise ValueError when the checkpointed learner whose metadata is ``meta`` (``to_arrow``'s;
    read from ``path``) is not the learner this configuration would train: --resume continues a
    model, it does not change it. Hyperparameters may change with
    ``allow_hyperparameter_change``; the rest never can."""
    fresh = new_learner(cfg)
    dim, bias_index = int(meta["dim"]), int(meta["bias_index"])
    settings = [("--algorithm", meta["algorithm"], fresh.algorithm),
                ("--loss", meta["loss"], fresh.loss),
                ("--bits", dim.bit_length() - 1, cfg.spec.bits),
                ("--no-bias", bias_index < 0, fresh.bias_index < 0),
                ("--classes", meta["n_classes"], fresh.n_classes)]
    if not cfg.allow_hyperparameter_change:
        settings += [(f"--{name.replace('_', '-')}", meta["hyperparameters"].get(name), value)
                     for name, value in sorted(fresh.hyperparameters.items())]
    for flag, was, now in settings:
        if was != now:
            hint = ("" if flag in ("--algorithm", "--loss", "--bits", "--no-bias", "--classes")
                    else "; pass --allow-hyperparameter-change to change it")
            raise ValueError(f"--resume: the model in {path} was trained with {flag} {was}, "
                             f"not {now}{hint}")
    if dim != fresh.dim or bias_index != fresh.bias_index:
        raise ValueError(f"--resume: the model in {path} has dimension {dim} and bias "
                         f"index {bias_index}, not {fresh.dim} and {fresh.bias_index}")
