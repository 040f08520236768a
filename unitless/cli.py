"""The `unitless` command: train, score, inspect.

Every option the command does not know is handed to Beam (e.g. --runner, --direct_num_workers),
so any Beam runner can run the same pipeline.
"""
import argparse
import builtins
import gc
import json
import logging
import os
import re
import sys
import time
from importlib import resources

from . import runners
from .console import configure_logging

configure_logging()  # before Beam is imported: its import logs warnings not meant for the user
from .connectors.format_table import FORMATS, OUTPUT_FORMATS  # noqa: E402
from .connectors.kafka import is_kafka  # noqa: E402
from .connectors.storage import is_dir, where  # noqa: E402
from .learner import ALGORITHMS, LOSS_CODES  # noqa: E402
from .pipelines.config import (HYPERPARAMETERS, LEARN_OPTIONS, OUTPUT_OPTIONS,  # noqa: E402
                               READ_OPTIONS, REFRESH_SECONDS, TIME_UNITS, configure)

def bundled_example():
    return str(resources.files("unitless") / "data" / "artificial.csv.gz")


def _input_args(p):
    p.add_argument("--input", action="append", nargs="+", metavar="PATH",
                   help="file paths or globs (one or more, repeatable; gzip ok), or "
                        "kafka://host:port/topic")
    p.add_argument("--format", choices=FORMATS,
                   help="input format, for files of any extension (default: from the extension)")
    p.add_argument("--label-column", default=READ_OPTIONS["label_column"],
                   help="the label's column or field (a record without one is served, not "
                        "learned)")
    p.add_argument("--id-column",
                   help="a column copied to each prediction row (needed with --labels)")
    p.add_argument("--model-key-column", help="one independent model per value of this column")
    p.add_argument("--weight-column", help="importance weight column")
    p.add_argument("--time-column",
                   help="the records' own time (for --label-wait): a number of --time-unit "
                        "since the epoch, or ISO 8601 text (UTC without an offset); a record "
                        "without one is refused (default: Kafka record timestamps)")
    p.add_argument("--time-unit", choices=TIME_UNITS, default=READ_OPTIONS["time_unit"],
                   help="the unit of numeric --time-column values (default s)")
    p.add_argument("--categorical-columns", default="",
                   help="comma-separated columns whose values are categories (one-hot)")
    p.add_argument("--delimiter", default=READ_OPTIONS["delimiter"],
                   help="CSV field delimiter, one character or several (e.g. ', '; "
                        "'\\t' or tab for a tab); values are stripped of surrounding whitespace")
    p.add_argument("--no-header", action="store_true",
                   help="CSV: the first line is data, not column names")
    p.add_argument("--columns",
                   help="CSV: comma-separated names of the columns (default: the header line; "
                        "with --no-header, the column numbers 0,1,...)")
    p.add_argument("--ignore-columns", default="",
                   help="comma-separated columns to drop (neither features nor anything else)")
    p.add_argument("--bits", type=int, default=READ_OPTIONS["bits"], help="hash features into 2^bits (default 18)")
    p.add_argument("--no-bias", action="store_true", help="no constant feature")
    p.add_argument("--predictions", default=OUTPUT_OPTIONS["predictions"], help="output directory")
    p.add_argument("--output-format", choices=OUTPUT_FORMATS,
                   default=OUTPUT_OPTIONS["output_format"], help="the predictions' format")
    p.add_argument("--dead-letter", default=OUTPUT_OPTIONS["dead_letter"],
                   help="directory for malformed records (JSON lines)")
    p.add_argument("--chunk-size", type=int, default=READ_OPTIONS["chunk_size"], help="examples per micro-batch")
    p.add_argument("--classes", default=str(READ_OPTIONS["classes"]), metavar="K|NAMES",
                   help="K > 1: one-against-all over classes 1..K; or the comma-separated "
                        "names of the classes (e.g. setosa,versicolor,virginica): the i-th "
                        "name is class i, any other label is refused")
    p.add_argument("--positive-label", metavar="VALUE",
                   help="binary task: a label equal to VALUE (as text, spaces stripped) is "
                        "+1, any other label -1 (e.g. '>50K', yes, 2)")
    p.add_argument("--kafka-config", action="append", default=[], metavar="NAME=VALUE",
                   help="Kafka client setting, in kafka-python's or librdkafka's names, e.g. "
                        "security_protocol=SASL_SSL or security.protocol=SASL_SSL (repeatable)")
    p.add_argument("--kafka-client", default=READ_OPTIONS["kafka_client"],
                   choices=("auto", "confluent-kafka", "kafka-python"),
                   help="the Kafka client: auto (default) takes $UNITLESS_KAFKA_CLIENT if set, "
                        "else confluent-kafka when installed (pip install 'unitless[confluent]'), "
                        "else kafka-python")


def _hyperparameter_help(name):
    """What --NAME means for each learner that takes it, with its default, from the registry."""
    from .learner.registry import meaning
    if name == "quantile_tau":
        return "τ of the quantile loss (--loss quantile; default 0.5)"
    parts = {}
    for a in ALGORITHMS.values():
        if name in a.hyperparameters:
            default = a.hyperparameters[name]
            parts.setdefault(meaning(a, name), []).append(
                f"{a.name} {'the loss' + chr(39) + 's' if default is None else f'{default:g}'}")
    return "; ".join(f"{text} (default: {', '.join(who)})" for text, who in parts.items())


def parser():
    top = argparse.ArgumentParser(prog="unitless", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="learn from examples, emitting a prediction for each")
    _input_args(train)
    train.add_argument("--algorithm", choices=sorted(ALGORITHMS),
                       default=LEARN_OPTIONS["algorithm"], help="the learner (README: which to "
                                                                "choose)")
    train.add_argument("--loss", choices=sorted(LOSS_CODES), default=LEARN_OPTIONS["loss"],
                       help="the loss learned and reported: logistic or hinge for classes, "
                            "squared, absolute or quantile for numbers")
    train.add_argument("--model-dir", default=LEARN_OPTIONS["model_dir"],
                       help="where checkpoints go: a directory or s3:// prefix")
    train.add_argument("--checkpoint-every", type=int,
                       default=LEARN_OPTIONS["checkpoint_every"],
                       help="checkpoint each model every N examples (always at end of input)")
    train.add_argument("--checkpoint-seconds", type=float,
                       default=LEARN_OPTIONS["checkpoint_seconds"],
                       help="also checkpoint when T seconds passed since the last one")
    train.add_argument("--keep-checkpoints", type=int,
                       default=LEARN_OPTIONS["keep_checkpoints"],
                       help="how many newest checkpoints a model group (or shard) keeps; older "
                            "ones are deleted")
    train.add_argument("--resume", action="store_true",
                       help="continue each model from its latest checkpoint")
    train.add_argument("--overwrite", action="store_true",
                       help="start over: remove the models of earlier runs in --model-dir and "
                            "their part files in --predictions and --dead-letter first (without "
                            "it, a model directory holding models needs --resume)")
    train.add_argument("--allow-hyperparameter-change", action="store_true",
                       help="with --resume: continue with the hyperparameters given now "
                            "(algorithm, loss, bits, bias and classes can never change)")
    train.add_argument("--models-in-memory", type=int,
                       default=LEARN_OPTIONS["models_in_memory"],
                       help="decoded models a worker keeps between blocks, least recently used "
                            "dropped first; the others are decoded from Beam state again")
    train.add_argument("--model-memory-mib", type=int,
                       default=LEARN_OPTIONS["model_memory_mib"],
                       help="the most learner state (MiB) the decoded models a worker keeps may "
                            "hold together (the model in use is always kept)")
    train.add_argument("--labels", nargs="+", metavar="PATH", default=LEARN_OPTIONS["labels"],
                       help="files of labels (the id, label and model key columns) for the "
                            "inputs' examples, which carry none: each example is served, waits, "
                            "and is learned with its label in the labels' order (delayed "
                            "outcomes)")
    train.add_argument("--label-wait", metavar="DURATION", default=LEARN_OPTIONS["label_wait"],
                       help="with --labels on Kafka topics (or with --time-column): an "
                            "example waits for its label, and a label for its example, at most "
                            "this long (90s, 15m, 2h, up to 7d) on the records' own time; then "
                            "it expires (default: until the input ends; a topic that does not "
                            "end needs it)")
    train.add_argument("--expired-label", metavar="VALUE", default=LEARN_OPTIONS["expired_label"],
                       help="with --labels: an example whose label did not come (within "
                            "--label-wait, or by the end of the input) is learned with this "
                            "label, as if it had come then (default: dropped, counted)")
    train.add_argument("--max-time-skew", metavar="DURATION",
                       default=LEARN_OPTIONS["max_time_skew"],
                       help="with --label-wait: a record dated more than this (90s, 15m, 2h) "
                            "after the reader's clock when it reaches the join (the worker's "
                            "wall clock, for files too) is a dead letter, so that a wrong "
                            "clock cannot expire what waits (default: 5m; larger for records "
                            "dated in the future on purpose)")
    train.add_argument("--serve-apart", action="store_true",
                       help="serve the examples without a label apart from learning, at once, "
                            "by the models' newest published states (always so with --labels; "
                            "without it, an example is served in its place in the order, by "
                            "the model that learned every labeled one before it)")
    train.add_argument("--publish-seconds", metavar="SECONDS",
                       default=LEARN_OPTIONS["publish_seconds"],
                       help="serving apart: the learning step publishes the state of each "
                            "model that learned this often (in MODEL_DIR/published, not a "
                            "checkpoint), and serving looks for it four times as often "
                            "(default 1)")
    train.add_argument("--max-staleness", metavar="SECONDS",
                       default=LEARN_OPTIONS["max_staleness"],
                       help="serving apart: a prediction served by a model state published "
                            "longer ago than this is flagged stale (written all the same, and "
                            "counted; default 10)")
    train.add_argument("--model-ttl", metavar="DURATION", default=LEARN_OPTIONS["model_ttl"],
                       help="a model key not seen for this long (90s, 15m, 2h, 1d; on the "
                            "input's clock) leaves Beam state and worker memory, its newest "
                            "checkpoint holding it, and is read back when the key returns "
                            "(default: models stay)")
    train.add_argument("--model-groups", type=int, default=LEARN_OPTIONS["model_groups"],
                       help="the model keys share this many keys of the keyed step (Beam's "
                            "state, timers and commits are paid per group, not per model "
                            "key; each element stores its group's models together, so with "
                            "far more model keys than groups, raise it); 0: each model key "
                            "its own. Not with --shards, whose models are keyed each")
    train.add_argument("--shards", type=int, default=LEARN_OPTIONS["shards"],
                       help="split each model's features over S shards, each its own key (so "
                            "over workers), exchanging each round's partial predictions "
                            "through --feedback-topic; needs a streaming runner (default 0: "
                            "unsharded)")
    train.add_argument("--max-delay", type=int, default=LEARN_OPTIONS["max_delay"],
                       help="with --shards: gradients of the examples before it a shard's "
                            "prediction may miss; 0 (default) gives the unsharded model's "
                            "results (to rounding), larger ones fewer round trips")
    train.add_argument("--feedback-topic", metavar="KAFKA_URL",
                       help="with --shards: kafka://host:port/topic carrying the shards' parts "
                            "(default for a Kafka input: <its topic>.unitless-feedback)")
    train.add_argument("--log-every", type=float, default=LEARN_OPTIONS["log_every"], help="seconds between progress logs")
    train.add_argument("--max-dead-fraction", type=float, default=0.5,
                       help="fail the run (exit 2) when more than this fraction of the records "
                            "read is refused to the dead letters (default 0.5); a run that "
                            "learns nothing always fails")
    for name in HYPERPARAMETERS:
        train.add_argument("--" + name.replace("_", "-"), type=float,
                           help=_hyperparameter_help(name))
    score = sub.add_parser("score", help="apply checkpointed models to examples (no learning)")
    _input_args(score)
    score.add_argument("--model-dir", required=True,
                       help="model directory of a training run (one model per key)")
    score.add_argument("--models-in-memory", type=int,
                       default=LEARN_OPTIONS["models_in_memory"],
                       help="models a worker keeps, each read when its key is first scored; "
                            "the least recently scored leave first (read again when their key "
                            "returns)")
    score.add_argument("--refresh-seconds", type=float, default=REFRESH_SECONDS,
                       help="look for a key's newer checkpoint (or its first) when one of its "
                            "examples comes and this long has passed since the last look "
                            "(0: every time)")
    inspect = sub.add_parser("inspect", help="summarise a checkpoint")
    inspect.add_argument("checkpoint", help="a model directory (a line per model key), a "
                                            "checkpoint as that line names it, a part file of "
                                            "those checkpoints (a line per model it holds), or "
                                            "a per-key checkpoint file or directory of earlier "
                                            "versions")
    inspect.add_argument("--model-key", metavar="KEY",
                         help="the newest valid checkpoint of this model key in the model "
                              "directory")
    inspect.add_argument("--top", type=int, default=20,
                         help="list the N features ranked highest (default 20)")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    curve = sub.add_parser("curve", help="draw progressive loss and error rate against "
                                         "examples seen, per model key, from predictions")
    curve.add_argument("predictions", nargs="+", metavar="PREDICTIONS",
                       help="a predictions directory of `unitless train` (its part files) "
                            "or part files")
    curve.add_argument("--output", default="curve.png", help="PNG file (default curve.png)")
    curve.add_argument("--top", type=int, default=10,
                       help="draw the N model keys with most examples (default 10)")
    return top


def _options(args, names):
    """The options among ``names`` that the command line gives (argparse's dest names are the
    option names of ``configure``)."""
    given = vars(args)
    return {name: given[name] for name in names if name in given}


def _config(args, scoring=False):
    """The run's configuration from the command line: inputs (the bundled example when none is
    given: a shell-expanded ``--input dir/*.csv`` gives several), options checked once."""
    inputs = [path for group in args.input or [] for path in
              (group if isinstance(group, list) else [group])]
    options = _options(args, [*READ_OPTIONS, *OUTPUT_OPTIONS, *LEARN_OPTIONS, *HYPERPARAMETERS])
    if not inputs:
        inputs = [bundled_example()]
        options["id_column"] = options.get("id_column") or "id"
        print(f"unitless: no --input given; using the bundled example {inputs[0]}",
              file=sys.stderr)
        if not scoring and not options.get("resume") and _default_outputs(options):
            options["overwrite"] = True  # (a demonstration: typed twice, it runs twice)
            print("unitless: the example starts over each time: earlier runs' models and "
                  "outputs there are removed", file=sys.stderr)
    return configure(inputs, scoring=scoring, **options)


def _default_outputs(options):
    """Whether the run writes where the command does by default (out/): only there does the
    bundled example start over, never in a model directory the user named."""
    defaults = {**OUTPUT_OPTIONS, "model_dir": LEARN_OPTIONS["model_dir"]}
    return all(options.get(name, default) == default for name, default in defaults.items()
               if name != "output_format")


def parse_args(argv=None):
    """(unitless's arguments, Beam's): an argument neither knows is an error (exit 2), but for
    a job server's runner, which refuses those its job server does not declare either, when it
    submits (``runners``); an option REFUSED is an error on every runner."""
    args, rest = parser().parse_known_args(argv)
    try:
        unknown = runners.undeclared(rest)
        if runners.asks_job_server(rest):
            unknown = []  # (checked once the job server says what it declares)
    except ValueError as err:
        print(f"unitless: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    refused = runners.refused(rest)
    if refused:
        print(f"unitless: error: {refused[0]}: {refused[1]}", file=sys.stderr)
        raise SystemExit(2)
    if unknown:
        what = "argument" if not unknown[0].startswith("-") else "option"
        print(f"unitless: error: unknown {what} {unknown[0]!r} (not a unitless {args.command} "
              "option, nor an Apache Beam pipeline option); see unitless "
              f"{args.command} --help", file=sys.stderr)
        raise SystemExit(2)
    return args, rest


# the garbage collector's thresholds for the command's runs (Python's: 700, 10, 10)
COLLECTOR_THRESHOLDS = (50_000, 20, 10)


def _tune_collector():
    """Keep the objects made so far (the imports': Beam's, numpy's, pyarrow's, numba's, some
    146,000 functions, classes and dicts that live as long as the process) out of the garbage
    collector's walks, and collect the youngest objects less often (COLLECTOR_THRESHOLDS). A
    full collection walks every object alive, many with many models, and comes once enough
    objects have outlived two young collections: with Python's thresholds, what lives a
    bundle (elements, blocks, checkpoints taken) did so often enough to walk a run's models
    twice a second. The command owns its process, so it may; the transforms, which run in
    other people's, do not. Frozen once per process: a later call (``main`` called again)
    would freeze the earlier runs' garbage with it."""
    if not gc.get_freeze_count():
        gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


def train(args, beam_args):
    from .jit_cache import compiled_notice
    from .pipelines.summary import RunCounts, model_lines, refusal_problem, render
    from .pipelines.ordering import STATE_VALUE_BYTES
    from .pipelines.learn import build_training
    from .store.ownership import given_up_after
    pipeline = runners.pipeline(beam_args)  # first: it gives Beam's file systems their options
    _tune_collector()
    cfg = _config(args)
    started = time.time()
    with given_up_after(cfg.model_dir):  # (taken by Learn: one writer for the whole run)
        build_training(pipeline, cfg, streaming="--streaming" in beam_args)
        result = pipeline.run()
        result.wait_until_finish()
    counts = RunCounts(_counter(result, "examples"), _counter(result, "bad_records"),
                       time.time() - started, _counter(result, "replayed_examples_skipped"),
                       _counter(result, "served_examples"),
                       _counter(result, "examples_expired_without_label"),
                       _counter(result, "examples_expired_learned"))
    print(render(model_lines(cfg.model_dir, verify=False), counts))
    largest = _largest(result, STATE_VALUE_BYTES)
    if largest is not None:
        logging.getLogger("unitless").info(
            "largest value written to Beam state: %d bytes (%.2f MiB)", largest, largest / 2**20)
    notice = compiled_notice()
    if notice:
        print(notice)
    print(f"predictions: {where(cfg.predictions)}")
    print(f"models:      {where(cfg.model_dir)}")
    print(f"dead letters: {where(cfg.dead_letter)}")
    problem = refusal_problem(counts, args.max_dead_fraction,
                              None if is_kafka(cfg.dead_letter) else cfg.dead_letter, started,
                              cfg.resume)
    if problem:
        raise ValueError(problem)


def _largest(result, name):
    """The largest value of one of unitless's Beam distributions over the steps that record
    it, None if none did (or the runner reports none)."""
    from apache_beam.metrics.metric import MetricsFilter
    found = result.metrics().query(MetricsFilter().with_namespace("unitless").with_name(name))
    values = [r.committed if r.committed is not None else r.attempted
              for r in found["distributions"]]
    return max((v.max for v in values if v is not None and v.count), default=None)


def _counter(result, name):
    """The value of one of unitless's Beam counters, summed over the steps that count it."""
    from apache_beam.metrics.metric import MetricsFilter
    found = result.metrics().query(MetricsFilter().with_namespace("unitless").with_name(name))
    return int(sum((r.committed if r.committed is not None else r.attempted) or 0
                   for r in found["counters"]))


def score(args, beam_args):
    from .pipelines.score import build_scoring
    pipeline = runners.pipeline(beam_args)
    _tune_collector()
    cfg = _config(args, scoring=True)
    with pipeline as p:
        build_scoring(p, cfg, args.model_dir, streaming="--streaming" in beam_args,
                      refresh_seconds=args.refresh_seconds)
    print(f"predictions: {where(cfg.predictions)}")


def inspect(args):
    from .store.by_group import is_part
    from .store.models import latest_checkpoint, model_keys
    from .store.per_key import checkpoint_files
    from .store.shards import shard_counts
    from .pipelines.inspect import summary, render
    from .pipelines.summary import model_lines, part_lines, render_models
    path = args.checkpoint
    if args.model_key is not None:
        path = latest_checkpoint(path, args.model_key)
        if path is None:
            raise FileNotFoundError(f"{args.checkpoint} holds no valid checkpoint of model "
                                    f"{args.model_key!r}")
    elif is_dir(path) and not checkpoint_files(path) and (model_keys(path)
                                                          or shard_counts(path)):
        lines = model_lines(path)  # a whole model directory: one line per model key
        print(json.dumps([line.__dict__ for line in lines], indent=2, allow_nan=False)
              if args.json else render_models(lines, args.top))
        return
    elif is_part(path) and not is_dir(path):
        lines = part_lines(path)  # a group's part: a line per model, named by its locator
        print(json.dumps([line.__dict__ for line in lines], indent=2, allow_nan=False)
              if args.json else render_models(lines, args.top))
        return
    info = summary(path, args.top)
    print(json.dumps(info, indent=2, allow_nan=False) if args.json else render(info))


def curve(args):
    from .pipelines.curve import curves, plot, read_predictions, render
    if args.top < 1:
        raise ValueError(f"--top wants a positive number, got {args.top}")
    found = read_predictions(args.predictions)[0]
    if not found:
        raise ValueError("no predictions found in " + ", ".join(args.predictions))
    found = curves(found)
    print(render(found, max(args.top, 20)))
    plot(found, args.output, args.top)
    print(f"curve: {os.path.abspath(args.output)}")


def main(argv=None):
    args, beam_args = parse_args(argv)
    configure_logging()
    try:
        if args.command == "train":
            train(args, beam_args)
        elif args.command == "score":
            score(args, beam_args)
        elif args.command == "curve":
            curve(args)
        else:
            inspect(args)
    except Exception as err:  # noqa: BLE001 - a user's mistake is one line, a bug a traceback
        found = one_line(err)
        if found is None:
            raise
        message, code = found
        print(f"unitless: error: {message}", file=sys.stderr)
        return code
    return 0


USER_ERRORS = (OSError, ValueError)  # FileNotFoundError, PermissionError, ConnectionError too
WHILE_RUNNING = r"(?: \[while running '[^']*'\])*$"  # what a runner adds to a DoFn's error
# a runner's last line of a DoFn's error: "ValueError: ..." or "package.module.Class: ..."
BEAM_WRAPPED = re.compile(r"^(?:[\w.]+\.)?(\w+): (.*?)" + WHILE_RUNNING)


def one_line(err):
    """(message, exit code) for a failure told in one line, or None for anything else (a
    traceback): a failure the user can cause and fix (bad settings or input, an unreachable
    broker, an unwritable or full disk; 2), or a run that would not have learned each example
    once (``AccountingError``, ``TwoBundlesAtOnce``; 1). A runner reports a DoFn's exception
    inside its own (as 'OSError: ... [while running ...]')."""
    from .pipelines.accounting import AccountingError
    from .pipelines.bundles import TwoBundlesAtOnce
    failed = (AccountingError, TwoBundlesAtOnce)  # the run's, not the user's: exit 1
    ours = {kind.__name__: kind for kind in failed}
    while err is not None:
        if isinstance(err, (*USER_ERRORS, *failed)):
            return (re.sub(WHILE_RUNNING, "", str(err)),
                    1 if isinstance(err, failed) else 2)
        lines = [line for line in str(err).strip().splitlines() if line.strip()]
        match = BEAM_WRAPPED.match(lines[-1].strip()) if lines else None
        kind = match and (ours.get(match.group(1)) or getattr(builtins, match.group(1), None))
        if isinstance(kind, type) and issubclass(kind, (*USER_ERRORS, *failed)):
            return match.group(2), 1 if issubclass(kind, failed) else 2
        err = err.__cause__ or err.__context__
    return None


if __name__ == "__main__":
    sys.exit(main())
