"""The Kafka client under unitless's reader and sinks, behind one small interface: kafka-python
or confluent-kafka (librdkafka; the optional extra ``unitless[confluent]``), chosen per run by
``--kafka-client`` (or the environment's UNITLESS_KAFKA_CLIENT). Either gives keyed messages the
partition Kafka's Java client gives their key (murmur2), raises ConnectionError for its errors
and takes settings (``--kafka-config``) in either client's names (``SETTING_NAMES``); librdkafka's
log lines go to the ``unitless.kafka`` logger, a repeated one at most once in ``LOG_REPEAT_S``.
The interface: docs/design.md, "Kafka clients"; choosing one: docs/operations.md.
"""
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

log = logging.getLogger("unitless")
# how long a running pipeline's reader or sink waits for a broker that is away as it starts
# (restarting: a sent message waits as long, kafka-python's delivery timeout)
BROKER_WAIT_S = 120.0

CLIENTS = ("confluent-kafka", "kafka-python")  # fastest first
ENVIRONMENT = "UNITLESS_KAFKA_CLIENT"
SETTING_NAMES = {
    "client_id": "client.id", "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism", "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password", "sasl_kerberos_service_name":
        "sasl.kerberos.service.name",
    "ssl_cafile": "ssl.ca.location", "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location", "ssl_password": "ssl.key.password",
    "ssl_crlfile": "ssl.crl.location", "ssl_check_hostname": "ssl.endpoint.identification.algorithm",
    "request_timeout_ms": "request.timeout.ms", "metadata_max_age_ms": "metadata.max.age.ms",
    "reconnect_backoff_ms": "reconnect.backoff.ms", "linger_ms": "linger.ms",
    "compression_type": "compression.type", "max_request_size": "message.max.bytes",
    "fetch_max_wait_ms": "fetch.wait.max.ms", "fetch_min_bytes": "fetch.min.bytes",
    "fetch_max_bytes": "fetch.max.bytes", "max_partition_fetch_bytes": "max.partition.fetch.bytes",
}
_LIBRDKAFKA_NAMES = {v: k for k, v in SETTING_NAMES.items()}
LOG_REPEAT_S = 30.0


def installed() -> list[str]:
    """The clients importable here, fastest first."""
    found = []
    for name, module in (("confluent-kafka", "confluent_kafka"), ("kafka-python", "kafka")):
        try:
            __import__(module)
            found.append(name)
        except ImportError:
            pass
    return found


def choose(requested: Optional[str] = None) -> str:
    """The client to use: ``requested`` ("auto" or None: UNITLESS_KAFKA_CLIENT if set, else the
    fastest installed), checked."""
    name = requested if requested not in (None, "auto") else os.environ.get(ENVIRONMENT, "auto")
    if name == "auto":
        return installed()[0]
    if name not in CLIENTS:
        raise ValueError(f"--kafka-client wants auto or one of {', '.join(CLIENTS)}, "
                         f"got {name!r}")
    if name not in installed():
        raise ValueError(f"--kafka-client {name}: not installed (pip install "
                         f"'unitless[confluent]')")
    return name


def client_settings(client: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` ({name: value}, either client's names) named the ``client``'s way."""
    if client == "kafka-python":
        return {_LIBRDKAFKA_NAMES.get(k, k): _python_value(k, v) for k, v in settings.items()}
    out = {}
    for name, value in settings.items():
        name = SETTING_NAMES.get(name, name)
        if name == "ssl.endpoint.identification.algorithm" and isinstance(value, bool):
            value = "https" if value else "none"
        out[name] = value
    return out


def _python_value(name, value):
    if name == "ssl.endpoint.identification.algorithm":
        return value not in ("none", "")
    return value


@dataclass
class Records:
    """A poll's messages of one partition in offset order, as columns (a Python object per
    message was a large share of a fast stream's time)."""
    offsets: list
    keys: list
    values: list
    timestamps: list  # ms since the epoch

    def __len__(self):
        return len(self.offsets)

    def head(self, n: int) -> "Records":
        return Records(self.offsets[:n], self.keys[:n], self.values[:n], self.timestamps[:n])

    @staticmethod
    def concat(parts: Iterable["Records"]) -> "Records":
        return Records(*([x for part in parts for x in getattr(part, name)]
                         for name in ("offsets", "keys", "values", "timestamps")))


_VARYING = re.compile(r"rdkafka#\w+-\d+|\(after \d+ms in state \w+\)")  # not the cause


class _OncePerInterval(logging.Filter):
    """Lets a librdkafka line through when the same line (whichever client instance logged
    it) has not been let through in the last LOG_REPEAT_S seconds."""

    def __init__(self):
        super().__init__()
        self.last = {}

    def filter(self, record):
        line = _VARYING.sub("", record.getMessage())
        now = time.monotonic()
        if now - self.last.get(line, -LOG_REPEAT_S) < LOG_REPEAT_S:
            return False
        if len(self.last) >= 1000:  # lines not repeated lately need not be remembered
            self.last = {k: t for k, t in self.last.items() if now - t < LOG_REPEAT_S}
        self.last[line] = now
        return True


LIBRDKAFKA_LOG = logging.getLogger("unitless.kafka")
LIBRDKAFKA_LOG.addFilter(_OncePerInterval())


def _confluent_config(topic, **extra):
    """A confluent-kafka client's configuration for ``topic``, logging through LIBRDKAFKA_LOG."""
    return {**topic.client_args(**extra), "logger": LIBRDKAFKA_LOG}


# --- reading -----------------------------------------------------------------------------------

def open_reader(topic: Any, partition: int, max_records: int
                ) -> "_PythonReader | _ConfluentReader":
    """A reader of one partition of ``topic`` (a KafkaTopic) that commits nothing (positions
    live in checkpoints): ``seek(offset)``, ``poll(timeout_ms)`` -> [records], ``close()``. A
    running pipeline opens it: its broker is waited for (``BROKER_WAIT_S``)."""
    return _with_client(topic, f"reading partition {partition}",
                        {"kafka-python": _PythonReader, "confluent-kafka": _ConfluentReader},
                        partition, max_records, wait_s=BROKER_WAIT_S)


def partition_offsets(topic: Any, timeout_s: float = 10.0) -> dict[int, tuple[int, int]]:
    """{partition: (first offset, end offset)} of the topic now; ConnectionError within about
    ``timeout_s`` when the broker cannot be reached or has no such topic."""
    return _with_client(topic, "listing partitions",
                        {"kafka-python": _python_offsets, "confluent-kafka": _confluent_offsets},
                        timeout_s)


def _with_client(topic, doing, implementations, *args, wait_s=0.0):
    """The topic's client's implementation called with (topic, *args); that client's errors
    raised as ConnectionError naming the broker and what was being done. One that fails to
    start (kafka-python's client bootstraps as it is made: its broker away, restarting) is
    made again each second for ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return implementations[topic.client](topic, *args)
        except _errors(topic.client) as err:
            failed = ConnectionError(f"Kafka broker {topic.bootstrap_servers} unreachable "
                                     f"({doing}, topic {topic.topic!r}): {err}")
        if time.monotonic() >= deadline:
            raise failed
        log.warning("%s; trying again", failed)
        time.sleep(1.0)


def _errors(client):
    if client == "kafka-python":
        from kafka.errors import KafkaError
        return KafkaError
    from confluent_kafka import KafkaException
    return KafkaException


class _PythonReader:
    def __init__(self, topic, partition, max_records):
        from kafka import KafkaConsumer, TopicPartition
        self.tp = TopicPartition(topic.topic, partition)
        self.max_records = max_records
        self.consumer = KafkaConsumer(**topic.client_args(
            enable_auto_commit=False, group_id=None, max_poll_records=max_records))
        self.consumer.assign([self.tp])
        self.position = None

    def seek(self, offset):
        if offset != self.position:  # (seeking drops what was fetched ahead)
            self.consumer.seek(self.tp, offset)
            self.position = offset

    def poll(self, timeout_ms):
        from kafka.errors import KafkaError
        try:
            got = self.consumer.poll(timeout_ms=timeout_ms,
                                     max_records=self.max_records).get(self.tp, [])
        except KafkaError as err:
            raise ConnectionError(str(err)) from None
        if got:
            self.position = got[-1].offset + 1
        return Records([r.offset for r in got], [r.key for r in got], [r.value for r in got],
                       [r.timestamp for r in got])

    def poll_any(self, timeout_ms):
        """(kafka-python's poll returns once a fetch brings any message)"""
        return self.poll(timeout_ms)

    def close(self):
        self.consumer.close()


class _ConfluentReader:
    def __init__(self, topic, partition, max_records):
        from confluent_kafka import Consumer
        self.topic, self.partition, self.max_records = topic.topic, partition, max_records
        # assign() joins no group; librdkafka still wants a group id, one of its own. Once
        # it holds queued.min.messages (100,000) fetched ahead, librdkafka fetches again only
        # after fetch.queue.backoff.ms (1 s by default), by when a reader taking 8,192 a poll
        # has emptied its queue: polls come back empty for up to their whole wait, and a
        # backlog is read at half speed; a setting of the user's wins
        config = _confluent_config(topic, **{
            "group.id": f"unitless-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "auto.offset.reset": "earliest"})
        config.setdefault("fetch.queue.backoff.ms", 10)
        self.consumer = Consumer(config)
        self.position = None

    def seek(self, offset):
        from confluent_kafka import TopicPartition
        if offset != self.position:  # (re-assigning drops what was fetched ahead)
            self.consumer.assign([TopicPartition(self.topic, self.partition, offset)])
            self.position = offset

    def poll(self, timeout_ms):
        return self._records(self.consumer.consume(self.max_records, timeout_ms / 1000.0))

    def poll_any(self, timeout_ms):
        """The messages fetched already (up to max_records), or else the first to come within
        ``timeout_ms`` and those fetched with it: ``consume`` waits for max_records or its whole
        timeout, however many have come (a feedback part then waits out the timeout)."""
        got = self.consumer.consume(self.max_records, 0)
        if not got and timeout_ms > 0:
            first = self.consumer.poll(timeout_ms / 1000.0)
            if first is not None:
                got = [first, *self.consumer.consume(self.max_records - 1, 0)]
        return self._records(got)

    def _records(self, got):
        from confluent_kafka import KafkaError
        if any(m.error() is not None for m in got):
            for error in [m.error() for m in got if m.error() is not None]:
                if error.fatal():
                    raise ConnectionError(str(error))
                if error.code() != KafkaError._PARTITION_EOF:  # librdkafka retries on its own
                    log.warning("Kafka partition %s/%d: %s", self.topic, self.partition, error)
            got = [m for m in got if m.error() is None]
        if got:
            self.position = got[-1].offset() + 1
        return Records([m.offset() for m in got], [m.key() for m in got],
                       [m.value() for m in got], [m.timestamp()[1] for m in got])

    def close(self):
        self.consumer.close()


def _python_offsets(topic, timeout_s):
    from kafka import KafkaConsumer, TopicPartition
    deadline = time.time() + timeout_s
    ms = int(timeout_s * 1000)
    consumer = KafkaConsumer(**topic.client_args(enable_auto_commit=False, group_id=None,
                                                 request_timeout_ms=ms,
                                                 bootstrap_timeout_ms=ms))
    try:
        partitions = None
        while time.time() < deadline:
            partitions = consumer.partitions_for_topic(topic.topic)
            if partitions:
                break
            time.sleep(0.2)
        if not partitions:
            raise ConnectionError(f"Kafka topic {topic.topic!r} not found on "
                                  f"{topic.bootstrap_servers}")
        tps = [TopicPartition(topic.topic, p) for p in sorted(partitions)]
        begin, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        return {tp.partition: (begin[tp], end[tp]) for tp in tps}
    finally:
        consumer.close()


def _confluent_offsets(topic, timeout_s):
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer(_confluent_config(topic, **{"group.id": f"unitless-{uuid.uuid4().hex}",
                                                    "enable.auto.commit": False}))
    try:
        found = consumer.list_topics(topic.topic, timeout=timeout_s).topics.get(topic.topic)
        if found is None or found.error is not None or not found.partitions:
            raise ConnectionError(f"Kafka topic {topic.topic!r} not found on "
                                  f"{topic.bootstrap_servers}")
        return {p: consumer.get_watermark_offsets(TopicPartition(topic.topic, p),
                                                  timeout=timeout_s)
                for p in sorted(found.partitions)}
    finally:
        consumer.close()


# --- writing -----------------------------------------------------------------------------------

def open_producer(topic: Any, timeout_s: Optional[float] = None, linger_ms: int = 5
                  ) -> "_PythonProducer | _ConfluentProducer":
    """A producer to ``topic`` that waits for every in-sync replica (acks=all), giving up on a
    broker after ``timeout_s``; None (a running pipeline's sinks): the client's defaults, and a
    broker away as it starts is waited for (``BROKER_WAIT_S``). ``linger_ms``: how long a sent
    message waits for more to batch with before it goes (0: at once; ``flush`` then only
    waits for the acknowledgements). ConnectionError if it cannot start."""
    return _with_client(topic, "starting a producer",
                        {"kafka-python": _PythonProducer, "confluent-kafka": _ConfluentProducer},
                        timeout_s, linger_ms, wait_s=BROKER_WAIT_S if timeout_s is None else 0.0)


class _PythonProducer:
    def __init__(self, topic, timeout_s, linger_ms):
        from kafka import KafkaProducer
        self.topic = topic
        ms = {} if timeout_s is None else {
            k: int(timeout_s * 1000) for k in ("max_block_ms", "request_timeout_ms",
                                               "bootstrap_timeout_ms")}
        self.producer = KafkaProducer(**topic.client_args(acks="all", linger_ms=linger_ms, **ms))
        self.pending = []

    def send(self, key, value, partition=None, headers=None):
        self.pending.append(self.producer.send(self.topic.topic, key=key, value=value,
                                               partition=partition, headers=headers))

    def send_all(self, keys, values):
        for key, value in zip(keys, values):
            self.send(key, value)

    def flush(self, timeout_s=None):
        self.producer.flush(timeout=timeout_s)
        failed = next((f for f in self.pending if f.failed() or not f.is_done), None)
        self.pending = []
        if failed is not None:
            raise ConnectionError(f"Kafka topic {self.topic.topic!r} on "
                                  f"{self.topic.bootstrap_servers}: "
                                  f"{failed.exception or 'not acknowledged in time'}")

    def partitions(self):
        from kafka.errors import KafkaError
        try:
            return sorted(self.producer.partitions_for(self.topic.topic))
        except KafkaError as err:
            raise ConnectionError(f"Kafka topic {self.topic.topic!r} on "
                                  f"{self.topic.bootstrap_servers}: {err}") from None

    def close(self, timeout_s=None):
        self.producer.close(timeout=timeout_s)


class _ConfluentProducer:
    def __init__(self, topic, timeout_s, linger_ms):
        from confluent_kafka import Producer
        self.topic = topic
        self.timeout_s = 10.0 if timeout_s is None else timeout_s  # (metadata requests)
        # murmur2_random: keyed messages partitioned as Kafka's Java client and kafka-python do
        self.producer = Producer(_confluent_config(topic, **{
            "acks": "all", "linger.ms": linger_ms, "partitioner": "murmur2_random"}))
        self.failed = None

    def _delivered(self, err, _):
        if err is not None and self.failed is None:
            self.failed = err

    def send(self, key, value, partition=None, headers=None):
        args = {} if partition is None else {"partition": partition}
        while True:
            try:
                self.producer.produce(self.topic.topic, value=value, key=key, headers=headers,
                                      on_delivery=self._delivered, **args)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.05)

    def send_all(self, keys, values):
        """``send`` each (key, value) in order, handed to librdkafka in batches (one call, not
        one per message)."""
        from confluent_kafka import KafkaError
        messages = [{"key": k, "value": v} for k, v in zip(keys, values)]
        while messages:
            self.producer.produce_batch(self.topic.topic, messages, on_delivery=self._delivered)
            refused = [m for m in messages if "_error" in m]
            for m in refused:
                if m["_error"].code() != KafkaError._QUEUE_FULL and self.failed is None:
                    self.failed = m["_error"]  # (flush raises it)
            # those the full local queue refused (the tail) go again once deliveries drain it
            messages = [m for m in refused if m.pop("_error").code() == KafkaError._QUEUE_FULL]
            if messages:
                self.producer.poll(0.05)

    def flush(self, timeout_s=None):
        left = self.producer.flush(-1 if timeout_s is None else timeout_s)
        failed, self.failed = self.failed, None
        if failed is not None or left:
            raise ConnectionError(f"Kafka topic {self.topic.topic!r} on "
                                  f"{self.topic.bootstrap_servers}: "
                                  f"{failed or f'{left} messages not acknowledged in time'}")

    def partitions(self):
        from confluent_kafka import KafkaException
        try:
            found = self.producer.list_topics(self.topic.topic, timeout=self.timeout_s)
        except KafkaException as err:
            raise ConnectionError(f"Kafka broker {self.topic.bootstrap_servers} unreachable: "
                                  f"{err}") from None
        meta = found.topics.get(self.topic.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise ConnectionError(f"Kafka topic {self.topic.topic!r} on "
                                  f"{self.topic.bootstrap_servers}: "
                                  f"{meta.error if meta is not None else 'not found'}")
        return sorted(meta.partitions)

    def close(self, timeout_s=None):
        self.producer.flush(-1 if timeout_s is None else timeout_s)
