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
from typing import Any, Optional, Sequence

from ..runtime import runners
from .console import configure_logging

configure_logging()  # before Beam is imported: its import logs warnings not meant for the user
from ..connectors.kafka import is_kafka  # noqa: E402
from ..connectors.storage import is_dir, where  # noqa: E402
from ..pipelines import options  # noqa: E402
from ..pipelines.config import (HYPERPARAMETERS, LEARN_OPTIONS, OUTPUT_OPTIONS,  # noqa: E402
                                READ_OPTIONS, configure)


def bundled_example() -> str:
    return str(resources.files("unitless") / "data" / "artificial.csv.gz")


# the subcommands and what each does; their options are options.py's
COMMANDS = {
    "train": "learn from examples, emitting a prediction for each",
    "score": "apply checkpointed models to examples (no learning)",
    "inspect": "summarise a checkpoint",
    "curve": "draw progressive loss and error rate against examples seen, per model key, from "
             "predictions",
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="unitless", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)
    for command, summary in COMMANDS.items():
        command_parser = sub.add_parser(command, help=summary)
        for option in options.of(command):
            option.add_to(command_parser)
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


def parse_args(argv: Optional[Sequence[str]] = None) -> tuple[argparse.Namespace, list[str]]:
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
    """Keep the objects made so far (the imports': Beam's, numpy's, pyarrow's, numba's, many
    functions, classes and dicts that live as long as the process) out of the garbage
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


def train(args: argparse.Namespace, beam_args: list[str]) -> None:
    from ..pipelines.learn import build_training
    from ..pipelines.ordering import STATE_VALUE_BYTES
    from ..reports.summary import RunCounts, newest_shown, refusal_problem, render
    from ..runtime.jit_cache import compiled_notice
    from ..store.ownership import given_up_after
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
    print(render(newest_shown(cfg.model_dir), counts))
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


def score(args: argparse.Namespace, beam_args: list[str]) -> None:
    from ..pipelines.score import build_scoring
    pipeline = runners.pipeline(beam_args)
    _tune_collector()
    cfg = _config(args, scoring=True)
    with pipeline as p:
        build_scoring(p, cfg, args.model_dir, streaming="--streaming" in beam_args,
                      refresh_seconds=args.refresh_seconds)
    print(f"predictions: {where(cfg.predictions)}")


def inspect(args: argparse.Namespace) -> None:
    from ..reports.inspect import render, summary
    from ..reports.summary import model_lines, part_lines, render_models, shown
    from ..store.by_group import is_part
    from ..store.catalog import latest_checkpoint, model_keys
    from ..store.per_key import checkpoint_files
    from ..store.shards import shard_counts
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
              if args.json else render_models(shown(lines, args.top)))
        return
    elif is_part(path) and not is_dir(path):
        lines = part_lines(path)  # a group's part: a line per model, named by its locator
        print(json.dumps([line.__dict__ for line in lines], indent=2, allow_nan=False)
              if args.json else render_models(shown(lines, args.top)))
        return
    info = summary(path, args.top)
    print(json.dumps(info, indent=2, allow_nan=False) if args.json else render(info))


def curve(args: argparse.Namespace) -> None:
    from ..reports.curve import curves, plot, read_predictions, render
    if args.top < 1:
        raise ValueError(f"--top wants a positive number, got {args.top}")
    found: dict[str, Any] = read_predictions(args.predictions)[0]
    if not found:
        raise ValueError("no predictions found in " + ", ".join(args.predictions))
    found = curves(found)
    print(render(found, max(args.top, 20)))
    plot(found, args.output, args.top)
    print(f"curve: {os.path.abspath(args.output)}")


def main(argv: Optional[Sequence[str]] = None) -> int:
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


def one_line(err: Optional[BaseException]) -> Optional[tuple[str, int]]:
    """(message, exit code) for a failure told in one line, or None for anything else (a
    traceback): a failure the user can cause and fix (bad settings or input, an unreachable
    broker, an unwritable or full disk; 2), or a run that would not have learned each example
    once (``AccountingError``, ``TwoBundlesAtOnce``; 1). A runner reports a DoFn's exception
    inside its own (as 'OSError: ... [while running ...]')."""
    from ..pipelines.accounting import AccountingError
    from ..runtime.bundles import TwoBundlesAtOnce
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
            assert match is not None
            return match.group(2), 1 if issubclass(kind, failed) else 2
        err = err.__cause__ or err.__context__
    return None

