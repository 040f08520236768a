"""Every option of the `unitless` command and of the Beam transforms, once: its name (the
transforms' keyword; the command's flag is the name with dashes), its default, what it takes
and what it means. The command's parser (``cli.parser``), ``configure``'s defaults (config.py)
and docs/options.md (``unitless.cli.options_reference``) are made from this table; adding an
option is one entry here and its check in ``configure``.

Kinds: ``read`` (how examples are read), ``output`` (where outputs go), ``learn`` (how models
learn and are checkpointed) and ``hyperparameter`` are ``configure``'s; ``command`` options
are the command's own (its inputs, what it does after a run, and inspect's and curve's).
"""
import argparse
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from ..learner import ALGORITHMS, LOSS_CODES
from ..parse.formats import FORMATS, OUTPUT_FORMATS

TRAIN, SCORE, BOTH = ("train",), ("score",), ("train", "score")
# --time-unit: units a second
TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6}


@dataclass(frozen=True)
class Option:
    name: str
    kind: str
    commands: Sequence[str]
    help: Union[str, Callable[[], str]]
    default: Any = None
    type: Optional[Callable] = None
    choices: Optional[Sequence] = None
    metavar: Optional[str] = None
    flag: bool = False        # present or not (``store_true``)
    repeat: bool = False      # given again, it adds to the list (``append``)
    nargs: Optional[str] = None
    required: bool = False
    positional: bool = False
    at_least: Optional[float] = None  # the smallest value ``configure`` accepts

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """This option's argument in an argparse (sub)parser."""
        text = self.help() if callable(self.help) else self.help
        if "{default}" in text:  # (the default said where it is set)
            shown = self.default
            text = text.format(default=f"{shown:g}" if isinstance(shown, (int, float))
                               else shown)
        if self.flag:
            parser.add_argument(self.flag_name, action="store_true", help=text)
            return
        settings = {"help": text, "default": self.default}
        for name in ("type", "choices", "metavar", "nargs"):
            if getattr(self, name) is not None:
                settings[name] = getattr(self, name)
        if self.repeat:
            settings["action"] = "append"
        if self.required:
            settings["required"] = True
        if self.positional:
            del settings["default"]
            parser.add_argument(self.name, **settings)
        else:
            parser.add_argument(self.flag_name, **settings)

    @property
    def flag_name(self) -> str:
        return "--" + self.name.replace("_", "-")


def _hyperparameter_help(name):
    """What --NAME means for each learner that takes it, with its default, from the registry."""
    from ..learner.registry import meaning
    if name == "quantile_tau":
        return "τ of the quantile loss (--loss quantile; default 0.5)"
    parts = {}
    for a in ALGORITHMS.values():
        if name in a.hyperparameters:
            default = a.hyperparameters[name]
            parts.setdefault(meaning(a, name), []).append(
                f"{a.name} {'the loss' + chr(39) + 's' if default is None else f'{default:g}'}")
    return "; ".join(f"{text} (default: {', '.join(who)})" for text, who in parts.items())


def _hyperparameter(name):
    return Option(name, "hyperparameter", TRAIN, lambda: _hyperparameter_help(name), type=float)


OPTIONS = (
    # what both train and score read, and how
    Option("input", "command", BOTH, "file paths or globs (one or more, repeatable; gzip ok), "
           "or kafka://host:port/topic", repeat=True, nargs="+", metavar="PATH"),
    Option("format", "read", BOTH, "input format, for files of any extension (default: from "
           "the extension)", choices=tuple(FORMATS)),
    Option("label_column", "read", BOTH, "the label's column or field (a record without one "
           "is served, not learned)", "label"),
    Option("id_column", "read", BOTH, "a column copied to each prediction row (needed with "
           "--labels)"),
    Option("model_key_column", "read", BOTH, "one independent model per value of this column"),
    Option("weight_column", "read", BOTH, "importance weight column"),
    Option("time_column", "read", BOTH, "the records' own time (for --label-wait): a number of "
           "--time-unit since the epoch, or ISO 8601 text (UTC without an offset); a record "
           "without one is refused (default: Kafka record timestamps)"),
    Option("time_unit", "read", BOTH, "the unit of numeric --time-column values (default "
           "{default})",
           "s", choices=tuple(TIME_UNITS)),
    Option("categorical_columns", "read", BOTH, "comma-separated columns whose values are "
           "categories (one-hot)", ""),
    Option("delimiter", "read", BOTH, "CSV field delimiter, one character or several (e.g. "
           "', '; '\\t' or tab for a tab); values are stripped of surrounding whitespace", ","),
    Option("no_header", "read", BOTH, "CSV: the first line is data, not column names",
           False, flag=True),
    Option("columns", "read", BOTH, "CSV: comma-separated names of the columns (default: the "
           "header line; with --no-header, the column numbers 0,1,...)"),
    Option("ignore_columns", "read", BOTH, "comma-separated columns to drop (neither features "
           "nor anything else)", ""),
    Option("bits", "read", BOTH, "hash features into 2^bits (default {default})", 18, type=int),
    Option("no_bias", "read", BOTH, "no constant feature", False, flag=True),
    Option("predictions", "output", BOTH, "output directory", "out/predictions"),
    Option("output_format", "output", BOTH, "the predictions' format", "parquet",
           choices=OUTPUT_FORMATS),
    Option("dead_letter", "output", BOTH, "directory for malformed records (JSON lines)",
           "out/dead_letter"),
    Option("chunk_size", "read", BOTH, "examples per micro-batch", 8192, type=int, at_least=1),
    Option("classes", "read", BOTH, "K > 1: one-against-all over classes 1..K; or the "
           "comma-separated names of the classes (e.g. setosa,versicolor,virginica): the i-th "
           "name is class i, any other label is refused", "1", metavar="K|NAMES"),
    Option("positive_label", "read", BOTH, "binary task: a label equal to VALUE (as text, "
           "spaces stripped) is +1, any other label -1 (e.g. '>50K', yes, 2)", metavar="VALUE"),
    Option("kafka_config", "read", BOTH, "Kafka client setting, in kafka-python's or "
           "librdkafka's names, e.g. security_protocol=SASL_SSL or security.protocol=SASL_SSL "
           "(repeatable)", repeat=True, metavar="NAME=VALUE"),
    Option("kafka_client", "read", BOTH, "the Kafka client: auto (default) takes "
           "$UNITLESS_KAFKA_CLIENT if set, else confluent-kafka when installed (pip install "
           "'unitless[confluent]'), else kafka-python", "auto",
           choices=("auto", "confluent-kafka", "kafka-python")),
    # how models learn and are checkpointed (train)
    Option("algorithm", "learn", TRAIN, "the learner (README: which to choose)", "nag",
           choices=sorted(ALGORITHMS)),
    Option("loss", "learn", TRAIN, "the loss learned and reported: logistic or hinge for "
           "classes, squared, absolute or quantile for numbers", "logistic",
           choices=sorted(LOSS_CODES)),
    Option("model_dir", "learn", TRAIN, "where checkpoints go: a directory or s3:// prefix",
           "out/models"),
    Option("checkpoint_every", "learn", TRAIN, "checkpoint each model every N examples "
           "(always at end of input)", 0, type=int, at_least=0),
    Option("checkpoint_seconds", "learn", TRAIN, "also checkpoint when T seconds passed since "
           "the last one", 0.0, type=float, at_least=0),
    Option("keep_checkpoints", "learn", TRAIN, "how many newest checkpoints a model group (or "
           "shard) keeps; older ones are deleted", 3, type=int, at_least=1),
    Option("resume", "learn", TRAIN, "continue each model from its latest checkpoint", False,
           flag=True),
    Option("overwrite", "learn", TRAIN, "start over: remove the models of earlier runs in "
           "--model-dir and their part files in --predictions and --dead-letter first (without "
           "it, a model directory holding models needs --resume)", False, flag=True),
    Option("allow_hyperparameter_change", "learn", TRAIN, "with --resume: continue with the "
           "hyperparameters given now (algorithm, loss, bits, bias and classes can never "
           "change)", False, flag=True),
    Option("models_in_memory", "learn", TRAIN, "decoded models a worker keeps between blocks, "
           "least recently used dropped first; the others are decoded from Beam state again",
           10_000, type=int, at_least=1),
    Option("model_memory_mib", "learn", TRAIN, "the most learner state (MiB) the decoded "
           "models a worker keeps may hold together (the model in use is always kept)", 1024,
           type=int, at_least=1),
    Option("labels", "learn", TRAIN, "files of labels (the id, label and model key columns) "
           "for the inputs' examples, which carry none: each example is served, waits, and is "
           "learned with its label in the labels' order (delayed outcomes)", nargs="+",
           metavar="PATH"),
    Option("label_wait", "learn", TRAIN, "with --labels on Kafka topics (or with "
           "--time-column): an example waits for its label, and a label for its example, at "
           "most this long (90s, 15m, 2h, up to 7d) on the records' own time; then it expires "
           "(default: until the input ends; a topic that does not end needs it)",
           metavar="DURATION"),
    Option("expired_label", "learn", TRAIN, "with --labels: an example whose label did not "
           "come (within --label-wait, or by the end of the input) is learned with this label, "
           "as if it had come then (default: dropped, counted)", metavar="VALUE"),
    Option("max_time_skew", "learn", TRAIN, "with --label-wait: a record dated more than this "
           "(90s, 15m, 2h) after the reader's clock when it reaches the join (the worker's wall "
           "clock, for files too) is a dead letter, so that a wrong clock cannot expire what "
           "waits (default: 5m; larger for records dated in the future on purpose)",
           metavar="DURATION"),
    Option("serve_apart", "learn", TRAIN, "serve the examples without a label apart from "
           "learning, at once, by the models' newest published states (always so with "
           "--labels; without it, an example is served in its place in the order, by the model "
           "that learned every labeled one before it)", False, flag=True),
    Option("publish_seconds", "learn", TRAIN, "serving apart: the learning step publishes the "
           "state of each model that learned this often (in MODEL_DIR/published, not a "
           "checkpoint), and serving looks for it four times as often (default {default})", 1.0,
           metavar="SECONDS"),
    Option("max_staleness", "learn", TRAIN, "serving apart: a prediction served by a model "
           "state published longer ago than this is flagged stale (written all the same, and "
           "counted; default {default})", 10.0, metavar="SECONDS"),
    Option("model_ttl", "learn", TRAIN, "a model key not seen for this long (90s, 15m, 2h, 1d; "
           "on the input's clock) leaves Beam state and worker memory, its newest checkpoint "
           "holding it, and is read back when the key returns (default: models stay)",
           metavar="DURATION"),
    Option("model_groups", "learn", TRAIN, "the model keys share this many keys of the keyed "
           "step (Beam's state, timers and commits are paid per group, not per model key; each "
           "element stores its group's models together, so with far more model keys than "
           "groups, raise it); 0: each model key its own. Not with --shards, whose models are "
           "keyed each", 1024, type=int, at_least=0),
    Option("shards", "learn", TRAIN, "split each model's features over S shards, each its own "
           "key (so over workers), exchanging each round's partial predictions through "
           "--feedback-topic; needs a streaming runner (default {default}: unsharded)", 0,
           type=int, at_least=0),
    Option("max_delay", "learn", TRAIN, "with --shards: gradients of the examples before it a "
           "shard's prediction may miss; {default} (default) gives the unsharded model's "
           "results (to rounding), larger ones fewer round trips", 0, type=int, at_least=0),
    Option("feedback_topic", "learn", TRAIN, "with --shards: kafka://host:port/topic carrying "
           "the shards' parts (default for a Kafka input: <its topic>.unitless-feedback)",
           metavar="KAFKA_URL"),
    Option("log_every", "learn", TRAIN, "seconds between progress logs", 10.0, type=float,
           at_least=0),
    Option("max_dead_fraction", "command", TRAIN, "fail the run (exit 2) when more than this "
           "fraction of the records read is refused to the dead letters (default {default}); a run "
           "that learns nothing always fails", 0.5, type=float),
    *(_hyperparameter(name) for name in ("learning_rate", "alpha", "epsilon", "lipschitz",
                                         "beta1", "beta2", "quantile_tau")),
    # scoring: a training run's models applied
    Option("model_dir", "learn", SCORE, "model directory of a training run (one model per "
           "key)", required=True),
    Option("models_in_memory", "learn", SCORE, "models a worker keeps, each read when its key "
           "is first scored; the least recently scored leave first (read again when their key "
           "returns)", 10_000, type=int),
    Option("refresh_seconds", "command", SCORE, "look for a key's newer checkpoint (or its "
           "first) when one of its examples comes and this long has passed since the last look "
           "(0: every time)", 30, type=float),
    # inspect and curve
    Option("checkpoint", "command", ("inspect",), "a model directory (a line per model key), a "
           "checkpoint as that line names it, a part file of those checkpoints (a line per "
           "model it holds), or a per-key checkpoint file or directory of earlier versions",
           positional=True),
    Option("model_key", "command", ("inspect",), "the newest valid checkpoint of this model key "
           "in the model directory", metavar="KEY"),
    Option("top", "command", ("inspect",), "list the N features ranked highest (default {default})",
           20, type=int),
    Option("json", "command", ("inspect",), "print the summary as JSON", False, flag=True),
    Option("predictions", "command", ("curve",), "a predictions directory of `unitless train` "
           "(its part files) or part files", nargs="+", metavar="PREDICTIONS", positional=True),
    Option("output", "command", ("curve",), "PNG file (default {default})", "curve.png"),
    Option("top", "command", ("curve",), "draw the N model keys with most examples (default "
           "{default})", 10, type=int),
)


def check_values(options: Mapping[str, Any]) -> None:
    """Refuse, in one line, a value of ``configure``'s ``options`` (a dict of every option by
    name) that is not one of its option's choices or is below its ``at_least``: the command's
    parser checks the first for its flags, the transforms' keywords come here only."""
    for option in OPTIONS:
        value = options.get(option.name)
        if option.kind == "command" or value is None:
            continue
        if option.choices is not None and value not in option.choices:
            raise ValueError(f"unknown {option.name.replace('_', ' ')} {value!r}; choose one "
                             f"of: {', '.join(option.choices)}")
        if option.at_least is not None and not (option.type or float)(value) >= option.at_least:
            raise ValueError(f"{option.flag_name} wants {option.at_least:g} or more, got "
                             f"{value}")


def of(command: str) -> List[Option]:
    """The options of one subcommand, in the order its --help lists them."""
    return [o for o in OPTIONS if command in o.commands]


def defaults(kind: str) -> Dict[str, Any]:
    """{name: default} of the options of one kind, each name once (its first entry's)."""
    found: Dict[str, Any] = {}
    for option in OPTIONS:
        if option.kind == kind:
            found.setdefault(option.name, option.default)
    return found


def default(name: str) -> Any:
    """The default of the option ``name`` (its first entry's)."""
    return next(o.default for o in OPTIONS if o.name == name)


DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(value: Union[str, float, None], option: str) -> float:
    """Seconds of a duration given as a number of seconds or text with a unit: '90', '90s',
    '15m', '2h', '1.5d'; None: 0 (off)."""
    if value is None:
        return 0.0
    found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([smhd]?)\s*", str(value))
    if isinstance(value, bool) or found is None:
        raise ValueError(f"{option} wants a duration such as 90s, 15m, 2h or 1d, got {value!r}")
    return float(found[1]) * DURATION_UNITS[found[2]]
