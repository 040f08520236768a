"""The type annotations of unitless/ hold: mypy, as pyproject.toml's [tool.mypy] sets it, finds
nothing (issue #60: a type checker in the quick tier)."""
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_mypy_finds_nothing_in_unitless():
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout
