"""docs/benchmarks.md: every result in benchmarks/results/, its title and the command that
wrote it, read from the result itself (`tests/project/test_docs.py` checks the page is current).

    .venv/bin/python benchmarks/index.py > docs/benchmarks.md
"""
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
HEADER = """# Benchmarks

Every measurement the docs cite, with the command that reproduces it (run from the repository
root; each writes its `.md` and `.json` beside the others and states its machine, load and
versions). Ratios are against a reference measured in the same run: Vowpal Wabbit, a bare Kafka
relay, the single-key or unsharded run. Generated: `.venv/bin/python benchmarks/index.py >
docs/benchmarks.md`.

| result | what | command |
|---|---|---|
"""


def entries():
    """(file name, title, command) of each result page."""
    for page in sorted(RESULTS.glob("*.md")):
        text = page.read_text()
        title = text.splitlines()[0].lstrip("# ").strip()
        command = re.search(r"^\* command: `([^`]+)`", text, re.MULTILINE)
        yield page.name, title, command.group(1) if command else ""


def render():
    rows = [f"| [{name}](../benchmarks/results/{name}) | {title.replace('|', '/')} | "
            f"`{command}` |" for name, title, command in entries()]
    return HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(render(), end="")
