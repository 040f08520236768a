"""`python -m deploy.flink.job_server start --conf KEY=VALUE` (docs/operations.md: a sharded
model's job server with a short network buffer timeout) gives every job it runs that Flink
configuration entry."""
import json
from pathlib import Path

from deploy.flink import job_server
from tests.helpers.commands import dead_letters, train
from unitless.connectors.files import read_output
from unitless.runtime.flink import BUFFER_TIMEOUT

ENTRY = (BUFFER_TIMEOUT, "5 ms")


def test_a_conf_entry_given_at_start_is_loaded_by_the_job_it_runs(flink_jar, tmp_path, capsys,
                                                                    monkeypatch):
    monkeypatch.setenv("UNITLESS_FLINK_JOB_SERVER_JAR", str(flink_jar))
    d = tmp_path / "js"
    assert job_server.main(["start", "--dir", str(d), "--parallelism", "1",
                            "--conf", "=".join(ENTRY)]) == 0
    endpoint = capsys.readouterr().out.split()[-1]
    try:
        rows = [{"id": i, "label": 1 if i % 3 else -1, "x": float(i)} for i in range(50)]
        data = tmp_path / "e.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = train(tmp_path / "out", "--input", data, "--format", "jsonl", "--id-column", "id",
                    "--runner", "PortableRunner", "--job_endpoint", endpoint,
                    "--environment_type", "LOOPBACK")
        assert read_output(str(out / "pred")).num_rows == 50 and not dead_letters(out)
        log = json.loads((d / "state.json").read_text())["log"]
        loaded = [line for line in Path(log).read_text().splitlines()
                  if "Loading configuration property: " + ", ".join(ENTRY) in line]
        assert loaded, "the job did not load the entry given with --conf"
    finally:
        assert job_server.main(["stop", "--dir", str(d)]) == 0
