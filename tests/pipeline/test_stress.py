"""The ordering and user-pipeline tests on Prism, repeated with both cores loaded: a slow
bundle is what made Prism run a key in two bundles at once and lose examples
(tests/pipeline/test_no_silent_loss.py), and load is what makes bundles slow. Each repetition asserts
every example learned once, in order, bit for bit. UNITLESS_STRESS_REPEAT sets how many (3; 50
for the figure in the issue's closing note)."""
import os
import subprocess
import sys

import pytest

from tests.pipeline import test_beam_transforms, test_order

REPEAT = int(os.environ.get("UNITLESS_STRESS_REPEAT", "3"))
TESTS = [  # (the modules, not their functions, imported: pytest would collect those again)
    lambda tmp_path: test_order.test_blocks_delivered_out_of_order_are_learned_in_input_order(
        tmp_path, "reversed", "prism"),
    lambda tmp_path: test_order.test_blocks_delivered_out_of_order_are_learned_in_input_order(
        tmp_path, "shuffled", "prism"),
    test_order.test_a_partition_block_that_continues_a_model_is_learned_on_arrival_in_order,
    lambda tmp_path: test_beam_transforms.test_learn_on_dicts_gives_the_commands_predictions(
        tmp_path, "prism"),
]

@pytest.fixture(scope="module")
def loaded_cpus():
    """A busy process per core, for as long as this module's tests run."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


@pytest.mark.parametrize("repetition", range(REPEAT * len(TESTS)))
def test_under_load(tmp_path, loaded_cpus, repetition):
    TESTS[repetition % len(TESTS)](tmp_path)
