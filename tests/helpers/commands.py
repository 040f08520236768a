"""What many tests do the same way: run `unitless train` as a user does (``cli.main``, in this
process) with its outputs under one directory, read what it wrote, and make Kafka topics to run
it on."""
import time

from unitless.cli.main import main
from unitless.connectors.files import read_output
from unitless.connectors.storage import join
from unitless.store.catalog import latest_checkpoint, model_keys, read_checkpoint

OUTPUTS = {"--predictions": "pred", "--model-dir": "models", "--dead-letter": "dead"}


def train(out, *args, expect=0):
    """`unitless train ARGS`, its predictions, models and dead letters in ``out``'s pred, models
    and dead (a local directory or a URL) where ``args`` do not name them; the test fails
    unless it exits with ``expect``. Returns ``out`` (``expect=None``: the exit code)."""
    args = [str(a) for a in args]
    outputs = [x for option, name in OUTPUTS.items() if option not in args
               for x in (option, join(str(out), name))]
    code = main(["train", *args, *outputs])
    if expect is None:
        return code
    assert code == expect, f"unitless train exited with {code}, not {expect}: {args}"
    return out


def run_train(directory, *args, out="out"):
    """``train`` into ``directory``/``out``, whatever its exit: (the exit code, that
    directory)."""
    out = directory / out
    return train(out, *args, expect=None), out


def dead_letters(out):
    """The dead letters a run wrote into ``out``, as dicts ([] when there were none)."""
    table = read_output(str(out / "dead"))
    return [] if table is None else table.to_pylist()


def latest_models(out):
    """{model key: its newest checkpoint's table} of a run's models under ``out``."""
    models = str(out / "models")
    return {k: read_checkpoint(latest_checkpoint(models, k)) for k in model_keys(models)}


def create_topics(bootstrap, *names, partitions=2):
    """Kafka topics of ``partitions`` partitions each (one replica: the tests' one broker)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1) for name in names])
    finally:
        admin.close()


def send(bootstrap, topic, messages, per_second=None, **settings):
    """Produce ``messages``, (key, value) or (key, value, timestamp in ms) each, acks=all, at
    ``per_second`` or at once; every send checked (a test whose own producer lost a message
    says so, rather than wait for it). Returns where each went, [(partition, offset)]."""
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **settings)
    try:
        began, sent = time.time(), []
        for i, (key, value, *stamp) in enumerate(messages):
            if per_second:
                time.sleep(max(0.0, began + i / per_second - time.time()))
            sent.append(producer.send(topic, key=key, value=value,
                                      timestamp_ms=stamp[0] if stamp else None))
        producer.flush()
        return [(m.partition, m.offset) for m in (future.get(timeout=60) for future in sent)]
    finally:
        producer.close()
