"""The docs say what the command does: docs/options.md is the command's own parser, and matches
`unitless <command> --help` option by option."""
import os
import re
import subprocess
import sys

import pytest

from unitless.cli import options_reference
from unitless.learner.registry import ALGORITHMS

from tests.helpers.readme import README, ROOT

OPTIONS = ROOT / "docs" / "options.md"
COMMANDS = ("train", "score", "inspect", "curve")


def test_the_options_reference_is_the_one_the_parser_writes():
    assert OPTIONS.read_text() == options_reference.render(), (
        "docs/options.md is stale: python -m unitless.cli.options_reference > docs/options.md")


def _sections(text):
    """{command: [(option names, meaning)]} from the reference's tables."""
    out, command = {}, None
    for line in text.splitlines():
        heading = re.match(r"## `unitless (\w+)`", line)
        if heading:
            command = out.setdefault(heading.group(1), [])
        elif command is not None and line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            command.append((re.findall(r"`([^`]+)`", cells[0]), cells[3].replace("\\|", "|")))
    return out


def _help(command):
    env = {**os.environ, "COLUMNS": "10000"}  # (one line an option: nothing wrapped)
    return subprocess.run([sys.executable, "-m", "unitless.cli", command, "--help"], env=env,
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_each_option_of_the_help_is_in_the_reference_with_its_meaning(command):
    reference = _sections(OPTIONS.read_text())
    assert set(reference) == set(COMMANDS)
    shown = _help(command)
    listed = {name for line in shown.splitlines()
              for name in re.findall(r"^\s+(--[\w-]+)", line)} - {"--help"}
    documented = {name for names, _ in reference[command] for name in names
                  if name.startswith("--")}
    assert listed == documented
    flat = " ".join(shown.split())
    for names, meaning in reference[command]:
        assert meaning in flat, (names, meaning)
    assert len(reference[command]) >= len(listed) > 0


def test_the_readme_is_short_and_its_links_lead_somewhere():
    text = README.read_text()
    assert len(text.splitlines()) < 200
    for page in (*re.findall(r"\]\(([^)#]+)\)", text), *re.findall(
            r"\]\(([^)#:]+)\)", "".join(p.read_text() for p in (ROOT / "docs").glob("*.md")))):
        assert (ROOT / page).exists() or (ROOT / "docs" / page).exists(), page


def test_the_readme_learner_table_says_what_the_registry_does():
    rows = {}
    for line in README.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        for name in re.findall(r"`(\w+)`", cells[0]) if line.startswith("| `") else ():
            rows[name] = cells
    assert set(rows) == set(ALGORITHMS)
    invariance = {"diagonal": "any per-feature scale", "linear": "any invertible linear map",
                  "none": "nothing"}
    for name, (_, tuning, invariant, shards, cost) in rows.items():
        a = ALGORITHMS[name]
        assert invariant == invariance[a.invariance], name
        assert shards == ("yes" if a.shardable else "no"), name
        assert (cost == "its features") == (not a.scans_all), name
        first = next(iter(a.hyperparameters), None)
        assert tuning == "nothing" or (
            first is not None and f"--{first.replace('_', '-')}" in tuning), name


def test_the_benchmarks_page_lists_every_result_with_its_command():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import index
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert (ROOT / "docs" / "benchmarks.md").read_text() == index.render(), (
        "docs/benchmarks.md is stale: .venv/bin/python benchmarks/index.py > docs/benchmarks.md")
    assert len(list(index.entries())) == len(list((ROOT / "benchmarks" / "results").glob("*.md")))
    # (benchmarks/run_all.py runs them again by these commands)
    for name, _, command in index.entries():
        script = command.split()[1]
        assert (ROOT / script).is_file() and script.startswith(
            ("benchmarks/learner/", "benchmarks/system/")), (name, command)


def test_every_metric_the_job_exports_is_documented():
    exported, named, constants = set(), set(), {}
    for path in (ROOT / "unitless").rglob("*.py"):
        text = path.read_text()
        exported |= set(re.findall(r'Metrics\.\w+\("unitless", "(\w+)"\)', text))
        named |= set(re.findall(r'Metrics\.\w+\("unitless", ([A-Z_]+)\)', text))
        constants.update(re.findall(r'^([A-Z_]+) = "(\w+)"$', text, re.MULTILINE))
    exported |= {constants[name] for name in named}
    documented = set(re.findall(r"^\| `(\w+)` \|", (ROOT / "docs" / "operations.md").read_text(),
                                re.MULTILINE))
    assert exported and exported == documented


def test_each_guarantee_names_the_tests_that_show_it_and_they_exist():
    text = (ROOT / "docs" / "guarantees.md").read_text()
    named = set()
    for bullet in re.split(r"\n(?=\* )", text)[1:]:
        tests = re.findall(r"`(tests/[\w/]+\.py)`", bullet)
        assert tests or "(same tests)" in bullet, bullet[:80]
        named |= set(tests)
    assert named and all((ROOT / path).exists() for path in named), named
