"""Kill-and-resume campaigns shared by the file and Kafka delivery tests: run a training
command, SIGKILL it right after a new checkpoint appears or at a random moment, run it again
(with --resume) until it completes, check the outcome, and start a new campaign until enough
kills have landed."""
import json
import os
import random
import signal
import subprocess
import tempfile
import time

from unitless.store.by_group import MANIFEST
from unitless.store.catalog import latest_checkpoint, read_checkpoint
from unitless.store.per_key import CHECKPOINT_NAME


def kills(usual):
    """How many kills a campaign lands: ``usual`` (what the suite and CI run), or
    $UNITLESS_KILLS where it is set, one setting for every campaign (fewer for a quick look
    while editing, more for a long run by hand)."""
    return int(os.environ.get("UNITLESS_KILLS", usual))


def checkpoint_names(models):
    """The paths of the checkpoint files naming models' states under a model directory: its
    groups' manifests and the per-key layout's checkpoints (a new one: a new checkpoint). From
    a listing alone, so that polling it stays cheap whatever the number of models."""
    found = set()
    for directory, _, files in os.walk(models):
        found.update(os.path.join(directory, name) for name in files
                     if MANIFEST.fullmatch(name) or CHECKPOINT_NAME.fullmatch(name))
    return found


def final_models(keys, models):
    """{key: (state table without names, examples_seen, cumulative_loss, input_positions)} of
    each key's newest checkpoint: what must equal an uninterrupted run's."""
    out = {}
    for key in keys:
        table = read_checkpoint(latest_checkpoint(str(models), key))
        meta = json.loads(table.schema.metadata[b"unitless"])
        out[key] = (table.drop_columns(["name"]), meta["examples_seen"], meta["cumulative_loss"],
                    meta["input_positions"])
    return out


def run_complete(cmd):
    """Run ``cmd`` to its end; a non-zero exit fails with the end of its stderr."""
    with tempfile.TemporaryFile() as err:
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=err)
        assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{tail(err)}"


def tail(file, size=6000):
    """The last ``size`` bytes of an open file, as text."""
    file.seek(0, os.SEEK_END)
    file.seek(max(0, file.tell() - size))
    return file.read().decode(errors="replace")


def run_and_kill(cmd, models, after_checkpoint, at_seconds):
    """Start the run; SIGKILL it (and its process group) as soon as a new checkpoint appears,
    or after ``at_seconds``. Returns True if it completed first (exit 0 is asserted)."""
    before = checkpoint_names(models)
    with tempfile.TemporaryFile() as err:
        process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                                   start_new_session=True)
        began = time.time()
        while process.poll() is None:
            if after_checkpoint and checkpoint_names(models) - before:
                break
            if not after_checkpoint and time.time() - began >= at_seconds:
                break
            time.sleep(0.002)
        if process.poll() is not None:
            assert process.returncode == 0, f"{cmd} exited {process.returncode}:\n{tail(err)}"
            return True
        kill_group(process)
        return False


def kill_group(process):
    """SIGKILL a run started in a session of its own, with the runner processes it started (a
    Prism runner would outlive its parent otherwise)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # the whole group exited already
        pass
    process.wait()


def campaigns(command, models, check, kills, duration, seed=7):
    """Kill-and-resume campaigns until ``kills`` kills landed; half of them right after a
    checkpoint was written. command(n) and models(n) give campaign n's command line (with
    --resume) and model directory; check(n) asserts its outcome once a run completed.
    Returns the number of campaigns."""
    rng = random.Random(seed)
    landed, n = 0, 0
    while landed < kills:
        n += 1
        while not run_and_kill(command(n), models(n), landed % 2 == 0,
                               rng.uniform(0.3, duration)):
            landed += 1
        check(n)
    assert n <= max(3, kills // 3), f"only {kills} kills over {n} campaigns: runs end too soon"
    return n
