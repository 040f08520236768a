"""Integration test for deploy/kafka/local_kafka.py: a real single-node KRaft
broker (no mocks).  Needs java 17+, Maven on first use (to fetch the broker
jars into ~/.cache/unitless/kafka) and kafka-python.

Run from the repo root:  python -m pytest tests/kafka/test_local_kafka.py
"""

from __future__ import annotations

import shutil
import socket
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402


# The broker's own tests: no pipeline runs, so no client to vary (conftest.py would): the one
# broker of the module, without a client set.
pytestmark = pytest.mark.parametrize("kafka_client", [None], scope="module")

if shutil.which("java") is None:  # the suite must not pass silently without a real broker
    raise RuntimeError("java is not on PATH: the Kafka integration tests need Java 17+")

TOPIC = "local-kafka-it"
PARTITIONS = 2
N = 1000
N_AFTER = 100
GROUP = "local-kafka-it-group"
WAIT_S = 60.0




def _value(i: int) -> bytes:
    return f"msg-{i:05d}".encode()


def _produce(bootstrap: str, start: int, count: int) -> dict:
    """Send messages start..start+count-1, message i to partition i % 2.

    Returns {partition: [(offset, value), ...]} as acknowledged by the broker.
    """
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                             linger_ms=5, request_timeout_ms=10000, max_block_ms=30000)
    try:
        futures = [(i % PARTITIONS, _value(i),
                    producer.send(TOPIC, key=str(i).encode(), value=_value(i), partition=i % PARTITIONS))
                   for i in range(start, start + count)]
        producer.flush(timeout=WAIT_S)
        acked: dict = {p: [] for p in range(PARTITIONS)}
        for p, v, f in futures:
            md = f.get(timeout=WAIT_S)
            assert md.partition == p
            acked[p].append((md.offset, v))
        return acked
    finally:
        producer.close(timeout=10)


def _consume_all(bootstrap: str, expected_total: int) -> dict:
    """Read every partition from the beginning; {partition: [(offset, key, value)]}."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=30000)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: dict = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + WAIT_S
        while sum(map(len, got.values())) < expected_total:
            assert time.monotonic() < deadline, (
                f"only {sum(map(len, got.values()))}/{expected_total} messages after {WAIT_S}s")
            for tp, records in consumer.poll(timeout_ms=1000).items():
                got[tp.partition].extend((r.offset, r.key, r.value) for r in records)
        return got
    finally:
        consumer.close()


def _expected(total: int) -> dict:
    exp: dict = {p: [] for p in range(PARTITIONS)}
    for i in range(total):
        p = i % PARTITIONS
        exp[p].append((len(exp[p]), str(i).encode(), _value(i)))
    return exp


@pytest.fixture(scope="module")
def produced(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)],
                            timeout_ms=30000)
        deadline = time.monotonic() + WAIT_S
        while True:
            desc = admin.describe_topics([TOPIC])
            parts = desc[0].get("partitions") or []
            if len(parts) == PARTITIONS and all(p.get("leader_id", -1) >= 0 for p in parts):
                break
            assert time.monotonic() < deadline, f"topic never got leaders: {desc}"
            time.sleep(0.2)
    finally:
        admin.close()
    acked = _produce(broker.bootstrap_servers, 0, N)
    for p in range(PARTITIONS):
        assert [o for o, _ in acked[p]] == list(range(N // PARTITIONS))
    return acked


def test_produce_and_consume_in_order(broker, produced):
    got = _consume_all(broker.bootstrap_servers, N)
    assert got == _expected(N)
    assert sum(map(len, got.values())) == N


def test_broker_restart_keeps_data_and_accepts_writes(broker, produced):
    bootstrap = broker.bootstrap_servers
    port = broker.port

    # Commit consumer-group offsets before the restart, to check they survive.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP,
                             enable_auto_commit=False, request_timeout_ms=30000)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        from kafka.structs import OffsetAndMetadata
        consumer.commit({tp: OffsetAndMetadata(123, "", -1) for tp in tps})
    finally:
        consumer.close()

    t0 = time.monotonic()
    broker.stop()
    assert not broker.is_running()
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex(("127.0.0.1", port)) != 0, "broker port still open after stop()"

    broker.start()
    restart_s = time.monotonic() - t0
    assert broker.is_running()
    assert broker.port == port and broker.bootstrap_servers == bootstrap
    print(f"broker restart took {restart_s:.1f}s")

    # Everything written before the restart is still there, in order.
    assert _consume_all(bootstrap, N) == _expected(N)

    # Committed offsets survived.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP,
                             enable_auto_commit=False, request_timeout_ms=30000)
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            committed = [consumer.committed(TopicPartition(TOPIC, p)) for p in range(PARTITIONS)]
            if committed == [123] * PARTITIONS:
                break
            assert time.monotonic() < deadline, f"committed offsets after restart: {committed}"
            time.sleep(0.5)
    finally:
        consumer.close()

    # New writes land after the old ones.
    acked = _produce(bootstrap, N, N_AFTER)
    for p in range(PARTITIONS):
        start = N // PARTITIONS
        assert [o for o, _ in acked[p]] == list(range(start, start + N_AFTER // PARTITIONS))
    assert _consume_all(bootstrap, N + N_AFTER) == _expected(N + N_AFTER)
