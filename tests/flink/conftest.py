"""One Flink job server per pytest session (deploy/flink/job_server.py), built from the jars
deploy/flink/build_job_server.sh fetches and caches (the Kafka broker fixture: tests/conftest.py)."""
import sys

import pytest

from deploy.flink.job_server import FlinkJobServer, job_server_jar

PARALLELISM = 2


@pytest.fixture(scope="session")
def flink_jar():
    """The job server jar: built (Maven fetch, about 200 MB, cached) on a fresh machine."""
    return job_server_jar(timeout=1800)


@pytest.fixture(scope="session")
def flink_job_server(flink_jar, tmp_path_factory):
    server = FlinkJobServer(jar=flink_jar, parallelism=PARALLELISM,
                            workdir=tmp_path_factory.mktemp("flink-job-server"))
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is not None:
            print(f"Flink job server exited early ({server.proc.returncode}):\n"
                  f"{server.log_tail()}", file=sys.stderr)
        server.stop()


@pytest.fixture
def flink_args(flink_job_server):
    """Beam options running a pipeline on the session's job server, 2 parallel subtasks."""
    yield ["--runner", "PortableRunner", "--job_endpoint", flink_job_server.endpoint,
           "--environment_type", "LOOPBACK", "--parallelism", str(PARALLELISM)]
    if flink_job_server.proc is None or flink_job_server.proc.poll() is not None:
        pytest.fail(f"the Flink job server died; its log:\n{flink_job_server.log_tail()}")
