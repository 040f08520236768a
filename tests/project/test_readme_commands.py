"""The README's commands, run as written (from a scratch directory): the main command prints
what the README shows, the files recipe learns every example, `inspect` and the DuckDB query
read what it wrote. The Kafka and Flink recipes: tests/kafka/test_readme_kafka.py,
tests/flink/test_readme_flink.py; the Beam example: test_readme_example.py."""
import contextlib
import io
import os
import re

from unitless.connectors.files import read_output

from tests.helpers.readme import README, ROOT, blocks, commands, run, write_clicks


def _normalized(text, cwd):
    """Output as the README shows it: paths relative, the checkpoint's token and the run's
    speed as words, log lines (timestamped) and the first-run compile note left out."""
    text = text.replace(f"{cwd}/", "").replace(f"{ROOT}/", "")
    text = re.sub(r"(part-\d+)-[0-9a-f]{32}", r"\1-<token>", text)
    text = re.sub(r"\([\d,]+ examples/s over [\d.]+ s\)", "(N examples/s over T s)", text)
    return [line for line in text.splitlines()
            if not re.match(r"\d{4}-\d\d-\d\d |\(this run compiled", line)]


def test_the_main_command_prints_what_the_readme_shows(tmp_path):
    (command,) = commands("Install and run")
    done = run(command, tmp_path, merged=True)
    shown = blocks("text", "Install and run")[0]
    assert _normalized(done.stdout, tmp_path) == _normalized(shown, tmp_path)
    assert len(read_output(str(tmp_path / "out" / "predictions"))) == 5000


def test_the_files_recipe_learns_every_example_and_inspect_and_duckdb_read_its_models(
        tmp_path):
    n = write_clicks(tmp_path)
    (command,) = commands("Your files")
    run(command, tmp_path)
    predictions = read_output(str(tmp_path / "out" / "predictions")).to_pylist()
    assert sorted(r["id"] for r in predictions) == sorted(
        f"{p}-{i}" for p in range(2) for i in range(n // 2))
    assert {r["model_key"] for r in predictions} == {f"c{i}" for i in range(50)}
    assert not os.listdir(tmp_path / "out" / "dead_letter")

    (inspect,) = commands("Look inside")
    shown = run(inspect, tmp_path).stdout
    assert "model key   'c42'" in shown and "examples    24 learned" in shown
    assert len(re.findall(r"^    \S+ +class 0 +w=", shown, re.MULTILINE)) == 4  # 3 and the bias

    (query,) = blocks("python", "Look inside")
    printed, cwd = io.StringIO(), os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(query, str(README), "exec"), {})
    finally:
        os.chdir(cwd)
    assert re.search(r"│ c42 +│ visits", printed.getvalue()), printed.getvalue()
