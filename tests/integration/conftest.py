"""A real single-node KRaft Kafka broker per test module (deploy/kafka/local_kafka.py)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from deploy.kafka.local_kafka import LocalKafka  # noqa: E402


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    k = LocalKafka(tmp_path_factory.mktemp("kafka"), startup_timeout=120)
    k.start()
    try:
        yield k
    finally:
        k.close()
