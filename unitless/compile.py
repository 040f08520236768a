"""Compile the learners and readers once, ahead of the first run: ``python -m unitless.compile``.

numba compiles a function on its first call and keeps the machine code in its on-disk cache
(``__pycache__`` beside the source, or ``NUMBA_CACHE_DIR``), so only the first run on a machine
pays (most of it for the one learning loop that every learner shares). The project's setup
(``scripts/bootstrap.sh``) and the worker images run this; the cache is tied to the CPU it was
built on, so an image compiles when it is built on the kind of machine that runs it, or when its
container starts. A run that compiled anyway in the command's own process (the in-process
runner) says so in one line (``jit_cache.compiled_notice``).
"""
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

VW_LINES = (b"1 'a |x a:1 b:2.5 c\n-1 0.5 |y d:1e-3\n| e\n")
LIBSVM_LINES = (b"1 1:0.5 3:2 # c\n-1 qid:2 2:1e-3\n")


def compile_all() -> None:
    """Run what a training run runs, on small data: the bundled example (CSV), VW text and
    libsvm files, each through the command, so every compiled function a run calls is in the
    cache."""
    from .cli.main import main
    with tempfile.TemporaryDirectory(prefix="unitless-compile-") as work:
        runs: list[list[str]] = [[]]
        for name, fmt, data in (("a.vw", "vw", VW_LINES), ("a.libsvm", "libsvm", LIBSVM_LINES)):
            (Path(work) / name).write_bytes(data)
            runs.append(["--input", str(Path(work) / name), "--format", fmt])
        for i, extra in enumerate(runs):
            out = Path(work) / f"run{i}"
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                code = main(["train", *extra, "--predictions", str(out / "p"), "--model-dir",
                             str(out / "m"), "--dead-letter", str(out / "d")])
            if code:
                raise SystemExit(f"unitless.compile: a training run failed ({code}):\n"
                                 f"{printed.getvalue()}")


if __name__ == "__main__":
    started = time.time()
    compile_all()
    print(f"unitless.compile: compiled in {time.time() - started:.0f} s", file=sys.stderr)
