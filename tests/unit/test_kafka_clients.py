"""The Kafka client choice and settings names (the clients themselves run against a real broker
in tests/kafka, once per installed client)."""
import logging

import pytest

from unitless.cli.main import main
from unitless.connectors.kafka import KafkaTopic
from unitless.connectors.kafka_clients import (CLIENTS, ENVIRONMENT, LOG_REPEAT_S, choose,
                                               client_settings, installed, _OncePerInterval)


def test_auto_takes_the_environment_then_the_fastest_installed(monkeypatch):
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    assert choose() == choose("auto") == installed()[0]
    assert installed() == [c for c in CLIENTS if c in installed()]  # fastest first
    monkeypatch.setenv(ENVIRONMENT, "kafka-python")
    assert choose() == "kafka-python"
    assert choose("confluent-kafka" if "confluent-kafka" in installed() else "kafka-python") \
        in installed()


def test_a_client_that_is_not_one_is_a_clear_error(capsys):
    with pytest.raises(ValueError, match="--kafka-client wants auto or one of"):
        choose("librdkafka")
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--input", "kafka://127.0.0.1:9/t", "--kafka-client", "java"])
    assert exit_.value.code == 2
    assert "invalid choice: 'java'" in capsys.readouterr().err


def test_settings_in_either_clients_names_reach_each_client_in_its_own():
    given = {"security_protocol": "SASL_SSL", "sasl.username": "u", "sasl_plain_password": "p",
             "ssl_check_hostname": False, "socket.keepalive.enable": True}
    assert client_settings("confluent-kafka", given) == {
        "security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p",
        "ssl.endpoint.identification.algorithm": "none", "socket.keepalive.enable": True}
    assert client_settings("kafka-python", given) == {
        "security_protocol": "SASL_SSL", "sasl_plain_username": "u", "sasl_plain_password": "p",
        "ssl_check_hostname": False, "socket.keepalive.enable": True}


def test_the_topic_carries_the_client_chosen(monkeypatch):
    monkeypatch.setenv(ENVIRONMENT, "kafka-python")
    topic = KafkaTopic.parse("kafka://a:1,b:2/t", {"client_id": "me"})
    assert (topic.client, topic.topic) == ("kafka-python", "t")
    assert topic.client_args(acks="all") == {"bootstrap_servers": ["a:1", "b:2"],
                                             "client_id": "me", "acks": "all"}
    if "confluent-kafka" in installed():
        topic = KafkaTopic.parse("kafka://a:1,b:2/t", {"client_id": "me",
                                                       "unitless.kafka_client": "confluent-kafka"})
        assert topic.client_args() == {"bootstrap.servers": "a:1,b:2", "client.id": "me"}


def test_a_repeated_librdkafka_line_is_let_through_once_per_interval(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("unitless.connectors.kafka_clients.time.monotonic", lambda: clock[0])
    once = _OncePerInterval()

    def line(client, text):  # as confluent-kafka logs librdkafka's lines
        return once.filter(logging.LogRecord("unitless.kafka", logging.ERROR, "", 0,
                                             "%s [%s] %s", ("FAIL", client, text), None))

    refused = "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused"
    assert line("rdkafka#consumer-1", refused)
    assert not line("rdkafka#consumer-2", refused)  # the same line from another client
    assert line("rdkafka#consumer-2", "Disconnected (after 2694ms in state UP)")
    assert not line("rdkafka#consumer-5", "Disconnected (after 735ms in state UP)")
    assert line("rdkafka#producer-3", "another cause")
    clock[0] += LOG_REPEAT_S - 1
    assert not line("rdkafka#consumer-1", refused)
    clock[0] += 1
    assert line("rdkafka#consumer-1", refused)
    # distinct lines (e.g. each naming another offset) are not remembered past the interval
    for i in range(3000):
        clock[0] += 0.1
        assert line("rdkafka#consumer-1", f"fetch at offset {i}")
    assert len(once.last) < 1000 + LOG_REPEAT_S * 10 + 1
    assert not line("rdkafka#consumer-1", "fetch at offset 2999")
