"""Everything a training or scoring run needs to know, in one validated object shared by the
`unitless` command and the Beam transforms (``unitless.beam``), independent of both.

Options have one name and one default each, in one table (options.py): the command's flag
``--label-column`` is the keyword ``label_column``. ``configure(**options)`` checks them all,
once, and returns a ``TrainConfig``; a bad option is a ValueError with a one-line reason.
"""
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple, Union, cast

from ..connectors.kafka import CLIENT_SETTING, is_kafka
from ..connectors.kafka_clients import choose
from ..learner import ALGORITHMS, LearnerState, bias_index, check_examples, new_state
from ..parse.spec import RecordSpec
from .inputs import classes, record_spec, resolve_inputs
from .label_options import joined_labels, label_expiry, time_skew
from .options import check_values, default, defaults, duration

# the options' defaults by kind, from the one table of them (options.py)
READ_OPTIONS = defaults("read")
OUTPUT_OPTIONS = defaults("output")
LEARN_OPTIONS = defaults("learn")
HYPERPARAMETERS = tuple(defaults("hyperparameter"))


@dataclass(kw_only=True)
class TrainConfig:
    """A run's options, checked and converted: ``configure`` makes it, and options.py says
    what each means and its default."""
    inputs: Optional[list]
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
    def idle_seconds(self) -> float:
        """A quiet stream's models are checkpointed, and published when serving apart, after
        this long without an element (``LearnBlocks.idle``); 0: never."""
        times = [t for t in (self.checkpoint_seconds,
                             self.publish_seconds if self.serve_apart else 0) if t]
        return min(times, default=0.0)

    def is_labels(self, source: Optional[str]) -> bool:
        """Whether a block's source is one of ``labels``: a file, or a partition of the
        topic."""
        return source in self.label_sources or (
            source is not None and source.rpartition("/")[0] in self.label_sources)


# how long a scoring step goes without looking for a key's newer checkpoint (``score.py``)
REFRESH_SECONDS = default("refresh_seconds")


def kafka_settings(value: Union[Mapping[str, Any], Sequence[str], None],
                   client: Optional[str] = "auto") -> Dict[str, Any]:
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


def configure(inputs: Union[str, Sequence[str], None] = None, scoring: bool = False,
              **options: Any) -> TrainConfig:
    """A checked TrainConfig from options named as READ_OPTIONS, OUTPUT_OPTIONS, LEARN_OPTIONS
    and HYPERPARAMETERS (missing ones take their defaults; None hyperparameters are the
    algorithm's defaults). ``inputs`` (paths, globs or one kafka:// URL) may be None for a
    pipeline that gets its examples otherwise."""
    known = {*READ_OPTIONS, *OUTPUT_OPTIONS, *LEARN_OPTIONS, *HYPERPARAMETERS}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r}; options are: {', '.join(sorted(known))}")
    o = {**READ_OPTIONS, **OUTPUT_OPTIONS, **LEARN_OPTIONS, **options}
    check_values(o)  # (the option table's choices and bounds, --format's and --time-unit's too)
    spec = record_spec(o, scoring)
    fmt = o["format"]
    if inputs is not None:
        inputs, fmt = resolve_inputs(inputs, fmt)
    if spec.time and fmt in ("vw", "libsvm"):
        raise ValueError(f"--time-column names a field, and {fmt} records have none: use "
                         "jsonl, csv or parquet (or Kafka record timestamps)")
    hp = hyperparameters(o, spec)
    n_classes = classes(o["classes"])[0]
    if n_classes > 1 and o["positive_label"] is not None:
        raise ValueError(f"--positive-label is for a binary task, not --classes {o['classes']}: "
                         "pass one of them")
    # (checked in this order, the first failing one said)
    settings = kafka_settings(o["kafka_config"], o["kafka_client"])
    feedback, ttl = sharding_feedback(o, inputs), duration(o["model_ttl"], "--model-ttl")
    if o["overwrite"] and o["resume"]:
        raise ValueError("--overwrite starts over and --resume continues: pass one of them")
    if ttl and int(o["shards"]):
        raise ValueError("--model-ttl is for models without --shards (a sharded model's shards "
                         "keep their state)")
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
        kafka_settings=settings,
        models_in_memory=int(o["models_in_memory"]), model_memory_mib=int(o["model_memory_mib"]),
        shards=int(o["shards"]), max_delay=int(o["max_delay"]),
        feedback_topic=feedback, model_groups=int(o["model_groups"]), model_ttl=ttl,
        serve_apart=apart,
        publish_seconds=publish_seconds, max_staleness=max_staleness)
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


def hyperparameters(o: Mapping[str, Any], spec: RecordSpec) -> dict:
    """{name: value} of the hyperparameters given (those None take the learner's defaults),
    each checked to apply to the algorithm."""
    learner, hp = ALGORITHMS[o["algorithm"]], {}
    for name in HYPERPARAMETERS:
        if o.get(name) is None:
            continue
        if name not in learner.hyperparameters and not (name == "quantile_tau"
                                                         and o["loss"] == "quantile"):
            raise ValueError(f"--{name.replace('_', '-')} does not apply to {o['algorithm']} "
                             f"(it takes: {', '.join(learner.hyperparameters) or 'nothing'})")
        hp[name] = float(o[name])
    if learner.matrices and spec.bits > 12:
        raise ValueError(f"{o['algorithm']} keeps d×d matrices: pass --bits 12 or less")
    return hp


def serving_apart(o: Mapping[str, Any]) -> Tuple[bool, float, float]:
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
    return cast(Tuple[bool, float, float], (apart, *seconds))


def sharding_feedback(o: Mapping[str, Any], inputs: Optional[Sequence[str]]) -> Optional[str]:
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


def learner_check(cfg: TrainConfig) -> LearnerCheck:
    return LearnerCheck(1 << cfg.spec.bits, cfg.n_classes, cfg.loss)


def new_learner(cfg: TrainConfig) -> LearnerState:
    """A fresh learner state for this configuration."""
    *settings, hyperparameters = _learner_args(cfg)
    return new_state(*settings, **dict(hyperparameters))


def _learner_args(cfg):
    """``new_state``'s arguments for this configuration, hashable: (algorithm, dim, loss,
    classes, bias index, ((hyperparameter, value), ...))."""
    return (cfg.algorithm, 1 << cfg.spec.bits, cfg.loss, cfg.n_classes,
            bias_index(cfg.spec.bits) if cfg.spec.bias else -1,
            tuple(sorted(cfg.hyperparameters.items())))


class _Settings(NamedTuple):
    algorithm: str
    loss: str
    dim: int
    bias_index: int
    n_classes: int
    hyperparameters: tuple  # ((name, value), ...), sorted


@lru_cache(maxsize=8)
def _learner_settings(*args):
    """What ``check_resume`` compares of a fresh learner of ``_learner_args`` (made once: a
    resumed run checks every model it reads back)."""
    *settings, hyperparameters = args
    fresh = new_state(*settings, **dict(hyperparameters))
    return _Settings(fresh.algorithm, fresh.loss, fresh.dim, fresh.bias_index, fresh.n_classes,
                     tuple(sorted(fresh.hyperparameters.items())))


def check_resume(cfg: TrainConfig, meta: Mapping[str, Any], path: str) -> None:
    """Raise ValueError when the checkpointed learner whose metadata is ``meta`` (``to_arrow``'s;
    read from ``path``) is not the learner this configuration would train: --resume continues a
    model, it does not change it. Hyperparameters may change with
    ``allow_hyperparameter_change``; the rest never can."""
    fresh = _learner_settings(*_learner_args(cfg))
    dim, bias_index = int(meta["dim"]), int(meta["bias_index"])
    settings = [("--algorithm", meta["algorithm"], fresh.algorithm),
                ("--loss", meta["loss"], fresh.loss),
                ("--bits", dim.bit_length() - 1, cfg.spec.bits),
                ("--no-bias", bias_index < 0, fresh.bias_index < 0),
                ("--classes", meta["n_classes"], fresh.n_classes)]
    if not cfg.allow_hyperparameter_change:
        settings += [(f"--{name.replace('_', '-')}", meta["hyperparameters"].get(name), value)
                     for name, value in fresh.hyperparameters]
    for flag, was, now in settings:
        if was != now:
            hint = ("" if flag in ("--algorithm", "--loss", "--bits", "--no-bias", "--classes")
                    else "; pass --allow-hyperparameter-change to change it")
            raise ValueError(f"--resume: the model in {path} was trained with {flag} {was}, "
                             f"not {now}{hint}")
    if dim != fresh.dim or bias_index != fresh.bias_index:
        raise ValueError(f"--resume: the model in {path} has dimension {dim} and bias "
                         f"index {bias_index}, not {fresh.dim} and {fresh.bias_index}")
