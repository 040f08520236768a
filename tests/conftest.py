import os
import pathlib
import sys

import pytest

# the helpers (tests/helpers/) keep pytest's account of a failing assert
pytest.register_assert_rewrite("tests.helpers")

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))


# the tiers: a test is marked by what it needs (its folder, fixtures or runner parameter, or by
# hand where none tells), so that the quick tier (``./test.sh --quick``: none of these) needs no
# broker, runner binary or object store
TIERS = {"kafka": "a Kafka broker", "prism": "Beam's Prism runner",
         "flink": "Flink's job server", "s3": "an object store (MinIO)",
         "kill": "a kill-and-resume campaign", "stress": "a large or long run"}


def pytest_configure(config):
    for name, needs in TIERS.items():
        config.addinivalue_line("markers", f"{name}: needs {needs} (not in the quick tier)")


def _tiers(item):
    path, name = item.path.as_posix(), item.name.lower()
    params = getattr(getattr(item, "callspec", None), "params", {}).values()
    found = {"flink"} if "/tests/flink/" in path else set()
    if "/tests/kafka/" in path or "broker" in item.fixturenames:
        found.add("kafka")
    if any(isinstance(v, str) and v == "prism" for v in params) or "prism" in name:
        found.add("prism")
    if {"s3", "bucket"} & set(item.fixturenames):
        found.add("s3")
    if "kill" in name:
        found.add("kill")
    if item.path.name == "test_stress.py":
        found.add("stress")
    return found


def pytest_collection_modifyitems(config, items):
    for item in items:
        for tier in _tiers(item):
            item.add_marker(tier)


@pytest.fixture(scope="session")
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.fail(f"the shared data sets are missing: expected {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def runners_are_named(monkeypatch, request):
    """A pipeline on Beam's default runner fails its test, unless the test is marked
    ``default_runner`` (a user's code, run as written): that runner hands it to Prism, to a
    Prism job server an earlier test started, or quietly to another runner when Prism does not
    start, so the test could pass on a runner it was not meant for (tests/helpers/runners.py)."""
    from apache_beam.runners.direct import direct_runner
    if request.node.get_closest_marker("default_runner"):
        return

    def refuse(self, pipeline, options):
        raise AssertionError("this test ran a pipeline on Beam's default runner: name the "
                             "runner (tests/helpers/runners.py)")
    monkeypatch.setattr(direct_runner.SwitchingDirectRunner, "run_pipeline", refuse)


@pytest.fixture(autouse=True)
def json_outputs_follow_their_schemas(request):
    """After each test, every JSON lines output it wrote under its ``tmp_path`` (predictions,
    scores, dead letters) parses strictly (no NaN or Infinity) and follows its output's shipped
    JSON Schema (unitless/schemas), so that every suite checks the contract. A test that
    writes malformed outputs on purpose is marked ``hand_written_outputs``."""
    checked = ("tmp_path" in request.fixturenames
               and not request.node.get_closest_marker("hand_written_outputs"))
    # (asked for now, so that it is torn down after this fixture looks in it)
    root = request.getfixturevalue("tmp_path") if checked else None
    yield
    if root is not None:
        from tests.helpers.messages import check_json_outputs
        check_json_outputs(root)


@pytest.fixture(scope="module")
def kafka_client():
    """The Kafka client pipelines use here: the default ("auto"); tests/kafka runs each
    test once per installed client."""
    return None


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory):
    """A real single-node KRaft Kafka broker for the session (deploy/kafka/local_kafka.py),
    started when a test first needs one."""
    from deploy.kafka.local_kafka import LocalKafka
    k = LocalKafka(tmp_path_factory.mktemp("kafka"), startup_timeout=120)
    k.start()
    try:
        yield k
    finally:
        k.close()


@pytest.fixture(scope="module")
def broker(kafka_client, kafka_server):
    """The session's broker, as each test module (and Kafka client) has it to itself: the
    tests name their topics, and what a module made (topics, consumer groups) is deleted when
    it is done, before the next one may make the same names (``kafka_io.delete_everything``).
    A test that stops the broker starts it again (here, should it fail before it did)."""
    from tests.helpers.kafka_io import delete_everything
    yield kafka_server
    if not kafka_server.is_running():
        kafka_server.start()
    delete_everything(kafka_server.bootstrap_servers)


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A real S3-compatible object store (MinIO, deploy/s3/local_s3.py) for the session, with
    the process environment pointing boto3 and Beam's S3 file system at it (and so the
    subprocesses' environment)."""
    from deploy.s3.local_s3 import LocalS3
    server = LocalS3(tmp_path_factory.mktemp("s3"))
    saved = dict(os.environ)
    server.start()
    os.environ.update(server.environment())
    try:
        yield server
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server.stop()


@pytest.fixture
def bucket(s3, request):
    """A fresh bucket's s3:// URL."""
    import re
    import uuid
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    return s3.create_bucket(f"t-{name}-{uuid.uuid4().hex[:12]}")
