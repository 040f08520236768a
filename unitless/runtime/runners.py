"""The command's pipeline and its runner: Beam's options from the command line, the FnApiRunner
when no runner is named, the project's Flink job server for ``--runner FlinkRunner``, and
which options a runner takes.

An option the command line gives must be unitless's, one of Beam's SDK's pipeline options, or,
on a runner that submits to a job server (``FlinkRunner``, ``PortableRunner``), one that job
server declares: the Java runners' own options (``--max_bundle_time_mills``,
``--max_bundle_size``, ...) are not in the Python SDK, and Beam asks the job server for them
when it submits. An option none of them declares is refused in one line: before the run where
the SDK decides, when the job server answers otherwise (Beam itself would drop it with a
warning). Options are refused by name (REFUSED) where the run's guarantees are not shown to
hold with them.
"""
import argparse
from typing import TYPE_CHECKING, Any, Iterable, Optional

if TYPE_CHECKING:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

JOB_SERVER_RUNNERS = ("flink", "portable")  # runners' names, lower case, without "runner"

REFUSED = {
    # Flink's own checkpoints restore Beam state and rewind sources after a failure, beside
    # unitless's checkpoints and positions; that the two compose (no example lost or learned
    # twice across a Flink restore) is not shown by a kill test yet
    "checkpointing_interval": "Flink's own checkpointing is not supported: unitless keeps its "
                              "own checkpoints (--checkpoint-every, --checkpoint-seconds) and "
                              "resumes from them (--resume)",
}


def undeclared(args: list[str], declared: Iterable[Any] = ()) -> list[str]:
    """The arguments among ``args`` (positional ones too) that no Beam pipeline option takes,
    nor one of ``declared`` (the job server's ``PipelineOptionDescriptor``s), parsed as Beam
    parses them. A bad value of a Beam option raises ValueError (one line, not Beam's usage of
    every option)."""
    if not args:
        return []
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.portability.api import beam_job_api_pb2
    boolean = beam_job_api_pb2.PipelineOptionType.BOOLEAN
    parsers = []

    def error(message):
        raise ValueError(f"Beam pipeline option: {message}")

    def capture(parser):
        parser.error = error
        for option in declared:  # (as Beam adds them: a flag, or an option with a value)
            try:
                parser.add_argument(f"--{option.name}", action="store_true"
                                    if option.type == boolean else "store")
            except argparse.ArgumentError:  # (one of the SDK's too)
                pass
        parsers.append(parser)

    PipelineOptions(args).get_all_options(add_extra_args_fn=capture)
    return parsers[0].parse_known_args(args)[1]


def refused(args: Iterable[str]) -> Optional[tuple[str, str]]:
    """(option, reason) of the first option ``args`` gives that REFUSED names, or None."""
    for arg in args:
        name = arg.split("=", 1)[0].lstrip("-")
        if arg.startswith("--") and name in REFUSED:
            return f"--{name}", REFUSED[name]
    return None


def runner_name(beam_args: list[str]) -> str:
    """The runner ``beam_args`` name (lower case, without "runner"; "" when none)."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    name = (PipelineOptions(beam_args).view_as(StandardOptions).runner or "").lower()
    return name.rsplit(".", 1)[-1].removesuffix("runner")


def asks_job_server(beam_args: list[str]) -> bool:
    """True when the runner ``beam_args`` name submits to a job server that declares options
    of its own (see the module docstring)."""
    return runner_name(beam_args) in JOB_SERVER_RUNNERS


def beam_options(beam_args: list[str]) -> "PipelineOptions":
    from apache_beam.options.pipeline_options import PipelineOptions
    options = PipelineOptions(beam_args)  # (what Learn needs of a runner, it sets itself)
    if runner_name(beam_args) == "flink":
        _flink_defaults(options, beam_args)
    return options


def _flink_defaults(options, beam_args):
    """--runner FlinkRunner without a job server jar: the project's (Beam's Flink 1.19 runner,
    built and cached by deploy/flink/build_job_server.sh, or $UNITLESS_FLINK_JOB_SERVER_JAR;
    Beam's own download is not reachable everywhere), an embedded local Flink cluster and
    LOOPBACK workers, unless the command line says otherwise; and the JVM options Flink gives
    a Java 17 JVM (``flink.JAVA_17_OPENS``) to the job server Beam starts."""
    from apache_beam.options.pipeline_options import (FlinkRunnerOptions, JobServerOptions,
                                                      PortableOptions)
    from .flink import JAVA_17_OPENS, job_server_jar
    given = {a.split("=")[0] for a in beam_args}
    flink = options.view_as(FlinkRunnerOptions)
    if "--job_server_jvm_properties" not in given:
        options.view_as(JobServerOptions).job_server_jvm_properties = list(JAVA_17_OPENS)
    if "--flink_job_server_jar" in given or flink.flink_submit_uber_jar:
        return
    try:
        flink.flink_job_server_jar = str(job_server_jar())
    except (FileNotFoundError, RuntimeError) as err:
        raise ValueError(f"--runner FlinkRunner: {err}") from None
    if "--flink_version" not in given:
        flink.flink_version = "1.19"
    if "--flink_master" not in given:
        flink.flink_master = "[local]"
    if "--environment_type" not in given and flink.flink_master in ("[local]", "[auto]"):
        options.view_as(PortableOptions).environment_type = "LOOPBACK"


def pipeline(beam_args: list[str]) -> "beam.Pipeline":
    """The command's pipeline: on the runner ``beam_args`` name (a job server's runner checks
    the options it is given, ``_checked``), else on the FnApiRunner."""
    import apache_beam as beam
    from .beam_patches import watch_jobs_without_a_deadline
    watch_jobs_without_a_deadline()
    options = beam_options(beam_args)
    if asks_job_server(beam_args):
        return beam.Pipeline(runner=_checked(runner_name(beam_args), beam_args),
                             options=options)
    if any(a.startswith("--runner") for a in beam_args):
        return beam.Pipeline(options=options)
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    return beam.Pipeline(runner=FnApiRunner(), options=options)


def _checked(name, beam_args):
    """The Flink or portable runner, whose job service handle refuses (ValueError) an option of
    ``beam_args`` that neither Beam's SDK nor the job server declares, before it submits."""
    from apache_beam.portability.api import beam_job_api_pb2
    from apache_beam.runners.portability import portable_runner
    from apache_beam.runners.portability.flink_runner import FlinkRunner
    from apache_beam.options.pipeline_options import FlinkRunnerOptions

    class Handle(portable_runner.JobServiceHandle):
        def get_pipeline_options(self):
            declared = self.job_service.DescribePipelineOptions(
                beam_job_api_pb2.DescribePipelineOptionsRequest(), timeout=self.timeout).options
            unknown = undeclared(beam_args, declared)
            if unknown:
                raise ValueError(f"unknown option {unknown[0]!r} (not a unitless option, nor "
                                 "an Apache Beam pipeline option, nor one the job server "
                                 "declares)")
            return super().get_pipeline_options()

    class Runner(FlinkRunner if name == "flink" else portable_runner.PortableRunner):
        def create_job_service_handle(self, job_service, options):
            # (FlinkRunner's: an uber jar's job keeps options the job server does not declare)
            return Handle(job_service, options, retain_unknown_options=name == "flink" and
                          options.view_as(FlinkRunnerOptions).flink_submit_uber_jar)

    return Runner()
