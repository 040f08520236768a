import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))


@pytest.fixture(scope="session")
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.fail(f"the shared data sets are missing: expected {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A real single-node KRaft Kafka broker per test module (deploy/kafka/local_kafka.py)."""
    from deploy.kafka.local_kafka import LocalKafka
    k = LocalKafka(tmp_path_factory.mktemp("kafka"), startup_timeout=120)
    k.start()
    try:
        yield k
    finally:
        k.close()
