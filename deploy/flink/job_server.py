#!/usr/bin/env python3
"""A persistent local Apache Flink job server for Beam's portable runner.

Runs the job server jar of ``deploy/flink/build_job_server.sh`` (Beam's FlinkJobServerDriver
with an embedded local Flink 1.19 cluster, ``--flink-master [local]``) in its own process
group, on free ports, and waits until its job endpoint accepts connections. Pipelines are then
submitted with ``--runner PortableRunner --job_endpoint HOST:PORT --environment_type LOOPBACK``
(plus ``--parallelism N``, ``--streaming``, ...); one job server serves many pipelines, which
saves the few seconds the FlinkRunner spends starting its own for every run.

The job server's log goes to a temporary file (``FlinkJobServer.log``), printed to stderr when
it fails to start (and by ``log_tail()``).

Python API (e.g. a pytest fixture)::

    with FlinkJobServer(parallelism=2) as js:
        run(["--runner", "PortableRunner", "--job_endpoint", js.endpoint,
             "--environment_type", "LOOPBACK"])

CLI (``start`` prints the job endpoint on stdout and leaves the server running)::

    python deploy/flink/job_server.py start [--port N] [--parallelism N] [--conf K=V] [--dir D]
    python deploy/flink/job_server.py status [--dir D]
    python deploy/flink/job_server.py stop [--dir D]
    python deploy/flink/job_server.py run [--port N] ...    # in the foreground, until Ctrl-C

Environment: ``UNITLESS_FLINK_JOB_SERVER_JAR`` (use this jar, do not build one), ``JAVA``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

__all__ = ["FlinkJobServer", "FlinkJobServerError", "job_server_jar", "free_port"]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # run as a script: the repository's unitless
from unitless.runtime.flink import JAVA_17_OPENS, job_server_jar  # noqa: E402  (one home: the CLI's too)
HOST = "127.0.0.1"
DEFAULT_STARTUP_TIMEOUT = 120.0


class FlinkJobServerError(RuntimeError):
    pass


def _log(msg: str) -> None:
    print(f"[flink_job_server] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


class FlinkJobServer:
    """A Flink job server process: ``start()``, ``endpoint`` ("127.0.0.1:PORT"), ``stop()``."""

    def __init__(self, jar: Optional[os.PathLike] = None, port: Optional[int] = None,
                 parallelism: Optional[int] = None, workdir: Optional[os.PathLike] = None,
                 startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
                 extra_args: Optional[List[str]] = None, conf: Optional[dict] = None):
        self.jar = Path(jar) if jar else None
        self.port = port
        self.parallelism = parallelism
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="flink-js-"))
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args or [])
        self.conf = dict(conf or {})  # Flink configuration entries of every job it runs
        self.proc: Optional[subprocess.Popen] = None
        self.log_path = self.workdir / "FlinkJobServer.log"

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    def command(self) -> List[str]:
        java = os.environ.get("JAVA") or shutil.which("java")
        if not java:
            raise FlinkJobServerError("'java' (11+) not found on PATH")
        cmd = [java, *JAVA_17_OPENS, "-jar", str(self.jar),
               "--job-host", HOST, "--job-port", str(self.port),
               "--artifact-port", str(free_port()),
               "--expansion-port", "-1",          # no Java expansion service
               "--flink-master", "[local]",
               "--artifacts-dir", str(self.workdir / "artifacts")]
        entries = {**self.conf, **({"parallelism.default": int(self.parallelism)}
                                   if self.parallelism else {})}
        if entries:
            conf = self.workdir / "conf"
            conf.mkdir(parents=True, exist_ok=True)
            (conf / "config.yaml").write_text("".join(f"{k}: {v}\n" for k, v in entries.items()))
            cmd += ["--flink-conf-dir", str(conf)]
        return cmd + self.extra_args

    def start(self) -> "FlinkJobServer":
        if self.proc is not None and self.proc.poll() is None:
            return self
        if self.jar is None:
            self.jar = job_server_jar()
        self.port = self.port or free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=str(self.workdir),
                                         start_new_session=True)
        deadline = t0 + self.startup_timeout
        while True:
            if self.proc.poll() is not None:
                self._fail(f"the job server exited with {self.proc.returncode}")
            if _port_open(self.port):
                break
            if time.monotonic() > deadline:
                self._fail(f"the job server did not listen on {self.endpoint} within "
                           f"{self.startup_timeout:.0f}s")
            time.sleep(0.2)
        self.startup_seconds = time.monotonic() - t0
        return self

    def _fail(self, why: str) -> None:
        tail = self.log_tail()
        self.stop()
        raise FlinkJobServerError(f"{why}; log {self.log_path}:\n{tail}")

    def log_tail(self, lines: int = 80) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 20.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        _kill_group(proc.pid, timeout, wait=proc.wait)

    def close(self) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "FlinkJobServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _kill_group(pid: int, timeout: float, wait=None) -> None:
    """SIGTERM the process group ``pid`` leads, SIGKILL it after ``timeout``."""
    for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if wait is not None:
                try:
                    wait(timeout=0.2)
                    return
                except subprocess.TimeoutExpired:
                    continue
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

def _default_dir() -> Path:
    root = os.environ.get("UNITLESS_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "unitless")
    return Path(root) / "flink" / "instance"


def _state(d: Path) -> Optional[dict]:
    try:
        return json.loads((d / "state.json").read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("start", "run"):
        p = sub.add_parser(name)
        p.add_argument("--port", type=int, default=None, help="job port (default: a free one)")
        p.add_argument("--parallelism", type=int, default=None,
                       help="Flink's default parallelism (a pipeline's --parallelism wins)")
        p.add_argument("--jar", default=None, help="job server jar (default: build/cached)")
        p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="a Flink configuration entry for every job it runs, e.g. "
                            "execution.buffer-timeout.interval='5 ms' (repeatable)")
        p.add_argument("--timeout", type=float, default=DEFAULT_STARTUP_TIMEOUT)
        p.add_argument("--dir", default=None)
    for name in ("status", "stop"):
        sub.add_parser(name).add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    d = Path(args.dir) if args.dir else _default_dir()
    state = _state(d)
    if args.cmd in ("status", "stop"):
        if not state or not _alive(state["pid"]):
            print("not running")
            (d / "state.json").unlink(missing_ok=True)
            return 1 if args.cmd == "status" else 0
        if args.cmd == "status":
            print(state["endpoint"])
            return 0
        _kill_group(state["pid"], 20.0)
        (d / "state.json").unlink(missing_ok=True)
        print("stopped")
        return 0
    if args.cmd == "start" and state and _alive(state["pid"]):
        print(state["endpoint"])
        return 0
    d.mkdir(parents=True, exist_ok=True)
    try:
        conf = dict(entry.split("=", 1) for entry in args.conf)
    except ValueError:
        ap.error(f"--conf wants KEY=VALUE, not {args.conf}")
    js = FlinkJobServer(jar=args.jar, port=args.port, parallelism=args.parallelism,
                        workdir=d, startup_timeout=args.timeout, conf=conf)
    try:
        js.start()
    except FlinkJobServerError as e:
        print(f"flink job server: {e}", file=sys.stderr)
        return 1
    _log(f"started in {js.startup_seconds:.1f}s; log {js.log_path}")
    if args.cmd == "start":
        (d / "state.json").write_text(json.dumps({"pid": js.proc.pid, "endpoint": js.endpoint,
                                                  "log": str(js.log_path)}))
        print(js.endpoint)
        return 0
    print(js.endpoint, flush=True)
    try:
        js.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        js.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
