"""Every Kafka test here runs once per installed Kafka client (``--kafka-client``'s choices),
each against a broker of its own: pipelines, in this process or in subprocesses, follow
UNITLESS_KAFKA_CLIENT."""
import pytest

from unitless.connectors.kafka_clients import ENVIRONMENT, installed


@pytest.fixture(scope="module", params=installed())
def kafka_client(request):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENVIRONMENT, request.param)
        yield request.param
