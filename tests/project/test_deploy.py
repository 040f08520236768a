"""The deployment files parse, name the images deploy/Dockerfile builds, and pass only options the
`unitless` command (or Beam) takes."""
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from unitless.cli.main import parse_args

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
VERSION = re.search(r'^version = "(.*)"', (DEPLOY.parent / "pyproject.toml").read_text(),
                    re.M).group(1)


def dockerfile_targets():
    return re.findall(r"^FROM \S+ AS (\w+)", (DEPLOY / "Dockerfile").read_text(), re.M)


def test_the_dockerfile_builds_the_three_images_from_files_that_exist():
    text = (DEPLOY / "Dockerfile").read_text()
    assert dockerfile_targets() == ["sdk", "launcher", "submitter"]
    for source in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for path in source.split():
            assert (DEPLOY.parent / path).exists(), path
    assert "FLEX_TEMPLATE_PYTHON_PY_FILE=/opt/unitless/dataflow_main.py" in text
    assert "COPY deploy/dataflow/main.py /opt/unitless/dataflow_main.py" in text


def test_the_flink_deployment_runs_the_sdk_worker_pool_and_submits_valid_options():
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "flink-deployment.yaml").read_text()))
    flink, job = docs
    assert flink["kind"] == "FlinkDeployment" and flink["apiVersion"] == "flink.apache.org/v1beta1"
    (pool,) = flink["spec"]["taskManager"]["podTemplate"]["spec"]["containers"]
    assert pool["image"].endswith(f"/unitless-sdk:{VERSION}") and pool["args"] == ["--worker_pool"]
    port = pool["ports"][0]["containerPort"]
    (submit,) = job["spec"]["template"]["spec"]["containers"]
    assert submit["image"].endswith(f"/unitless-submitter:{VERSION}")
    args = submit["args"]
    assert f"--environment_config=localhost:{port}" in args
    assert "--flink_version=1.19" in args  # the job server deploy/flink builds
    parsed, beam_args = parse_args(args)  # unknown options exit 2
    assert parsed.command == "train" and parsed.resume and "--streaming" in beam_args
    mount = submit["volumeMounts"][0]["mountPath"]
    assert parsed.model_dir.startswith(mount)
    assert pool["volumeMounts"][0]["mountPath"] == mount  # the workers write the checkpoints


def test_the_flex_template_names_only_options_the_command_takes():
    meta = json.loads((DEPLOY / "dataflow" / "metadata.json").read_text())
    args = ["train"]
    for p in meta["parameters"]:
        args += [f"--{p['name']}"] + ([] if p["name"] == "resume" else ["x"])
    args[args.index("--input") + 1] = "kafka://broker:9092/examples"
    args[args.index("--kafka-config") + 1] = "client_id=unitless"
    args[args.index("--format") + 1] = "jsonl"
    for number in ("--checkpoint-every", "--checkpoint-seconds"):
        args[args.index(number) + 1] = "60"
    args[args.index("--algorithm") + 1] = "nag"
    args[args.index("--loss") + 1] = "logistic"
    parsed, beam_args = parse_args(args)
    assert beam_args == [] and parsed.model_dir == "x"


def test_the_dataflow_launcher_script_is_valid_bash_and_uses_the_built_images():
    script = DEPLOY / "dataflow" / "launch.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    for target in ("sdk", "launcher"):
        assert f"--target {target}" in text and f"unitless-{target}:$VERSION" in text
    for setting in ("sdk_container_image", "streaming", "max_num_workers", "--update",
                    "jobs drain", "--temp-location", "--staging-location"):
        assert setting in text
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "PROJECT": "p", "REGION": "r",
                                "BUCKET": "gs://b", "REGISTRY": "reg"})
    assert usage.returncode == 2 and "launch.sh build" in usage.stdout


def test_the_submitter_image_points_the_command_at_the_job_server_it_builds():
    text = (DEPLOY / "Dockerfile").read_text()
    built = re.search(r"build_job_server\.sh --dir (\S+)", text).group(1)
    jar = re.search(r"ENV UNITLESS_FLINK_JOB_SERVER_JAR=(\S+)", text).group(1)
    script = (DEPLOY / "flink" / "build_job_server.sh").read_text()
    assert 'jar="$dir/beam-flink-job-server.jar"' in script
    assert jar == f"{built}/beam-flink-job-server.jar"
    runners = (DEPLOY.parent / "unitless" / "runtime" / "runners.py").read_text()
    assert "UNITLESS_FLINK_JOB_SERVER_JAR" in runners


def test_a_missing_flink_job_server_jar_is_a_clear_error(tmp_path, monkeypatch):
    from unitless.runtime.runners import beam_options
    from unitless.runtime.flink import job_server_jar
    missing = tmp_path / "none.jar"
    monkeypatch.setenv("UNITLESS_FLINK_JOB_SERVER_JAR", str(missing))
    with pytest.raises(FileNotFoundError, match="none.jar: no such file"):
        job_server_jar()
    with pytest.raises(ValueError, match="--runner FlinkRunner: UNITLESS_FLINK_JOB_SERVER_JAR="):
        beam_options(["--runner", "FlinkRunner"])
    # installed without the repository and nothing cached: what to do, in one line
    monkeypatch.delenv("UNITLESS_FLINK_JOB_SERVER_JAR")
    monkeypatch.setenv("UNITLESS_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match="pass --flink_job_server_jar"):
        job_server_jar(build=False)
