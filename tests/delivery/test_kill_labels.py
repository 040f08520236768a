"""Delayed outcomes across crashes: runs over two timestamped topics (a wait, an expired label)
SIGKILLed and resumed with --resume learn each label once and end with an uninterrupted run's
models (docs/delayed-outcomes.md, "Exactly once across crashes"). Once, with the default Kafka
client: the join is under test here, not the clients (tests/kafka runs them all)."""
import pytest

from tests.helpers.killing import kills
from tests.helpers.labels import kill_campaigns
from tests.helpers.runners import runner_args


@pytest.mark.parametrize("runner,usual", [("fnapi", 30), ("prism", 4)])
def test_killed_and_resumed_the_join_learns_every_label_once(broker, tmp_path, runner, usual):
    """30 kills on the FnApiRunner; on Prism, whose runs start slowly, 4 (``UNITLESS_KILLS=30``
    by hand: ``killing.kills``); see ``kill_campaigns``."""
    kill_campaigns(broker.bootstrap_servers, tmp_path, runner, runner_args(runner),
                   kills(usual))
