"""The learner check suite's checks of many models learned together (``many.ManyStates``) and of
serving (a prediction that reads a model and writes nothing, from many threads); checks.py
runs them with the others."""
import pickle
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from .arrow_form import from_arrow, to_arrow
from .check_data import same_bits, same_state, stream
from .examples import dense_batch, make_batch
from .many import ManyStates
from .names import FeatureNames
from .online import learn, learn_or_refuse, predict_next
from .state import new_state


def check_many_keys_equal_each_alone(algorithm: str) -> None:
    """Many models learned together (``many.ManyStates``: a block of many keys' examples in one
    call) equal each model learning its own examples alone (``learn_or_refuse``, one call per
    block), bit for bit: predictions, losses, refusals, counts and state. 1, 3 and 40 keys
    (round-robin, skewed, one dominant), blocks of 1, 7 and all the examples, binary and 3
    one-against-all classes; with examples served, invalid, overflowing (squared loss, labels
    of 1e90, a value of 1e99: the models they reach learn the per-model way), features that
    appear over time and keys that first come in a later block."""
    rng = np.random.default_rng(11)
    dim, n = 64, 160
    for n_keys, skew in ((1, None), (3, None), (40, 1.2), (40, 6.0)):
        for n_classes, loss in ((1, "logistic"), (3, "logistic"), (1, "absolute")):
            if n_keys == 1 and n_classes == 3:
                continue
            for block in (1, 7, n):
                _check_many(algorithm, rng, dim, n, n_keys, skew, n_classes, loss, block)


def _many_keys_data(rng, dim, n, n_keys, skew, n_classes, loss):
    """(each example's key, the examples, which are served) of ``_check_many``: ``n`` examples
    over ``n_keys`` keys (round-robin, else Zipf-skewed by ``skew``), features over 6 growing
    to ``dim`` at scales 10^-3..10^3; with the squared loss, labels and a value that overflow;
    example 50 not finite."""
    if skew is None:
        keys = np.arange(n) % n_keys
    else:
        p = 1.0 / np.arange(1, n_keys + 1) ** skew
        keys = rng.choice(n_keys, size=n, p=p / p.sum())
    lens = rng.integers(1, 7, n)
    rows = [rng.choice(min(dim, 6 + i // 4), size=k, replace=False) for i, k in enumerate(lens)]
    indices = np.concatenate(rows)
    values = rng.normal(size=len(indices)) * 10.0 ** rng.integers(-3, 4, len(indices))
    if n_classes > 1:
        labels = rng.integers(1, n_classes + 1, n).astype(float)
    else:
        labels = rng.choice([-1.0, 1.0], n) if loss == "logistic" else rng.normal(size=n)
    if loss == "squared":
        labels[[9, 10, 100]] = [1e90, -1e90, 1e95]
        values[len(rows[0]) + len(rows[1])] = 1e99  # example 2
    values[sum(len(r) for r in rows[:50])] = np.nan  # example 50 is refused
    batch = make_batch(np.concatenate([[0], np.cumsum(lens)]), indices, values, labels)
    served = rng.random(n) < 0.2
    return keys, batch, served


def _check_many(algorithm, rng, dim, n, n_keys, skew, n_classes, loss, block):
    what = f"{n_keys} keys (skew {skew}), {n_classes} classes, {loss}, blocks of {block}"
    keys, batch, served = _many_keys_data(rng, dim, n, n_keys, skew, n_classes, loss)
    template = new_state(algorithm, dim, loss, n_classes=n_classes)
    many = ManyStates(template.copy(), rows=2, capacity=4)  # (grows as it goes)
    alone = {}
    for a in range(0, n, block):
        learned = 0
        part, part_served = batch.slice(a, min(a + block, n)), served[a:a + block]
        part_keys = keys[a:a + block]
        with np.errstate(all="ignore"):
            kept, result, refused, seen = many.learn(many.rows([f"key {k}" for k in part_keys]),
                                                     part, part_served)
        expected_refused = []
        for k in np.unique(part_keys):
            mine = np.flatnonzero(part_keys == k)
            state = alone.setdefault(k, template.copy())
            start = state.examples_seen
            with np.errstate(all="ignore"):
                got, own, dropped = learn_or_refuse(state, part.take(mine), part_served[mine])
            expected_refused += [(int(mine[p]), reason) for p, reason in dropped]
            assert np.isin(mine[got], kept).all(), f"{what}: key {k}: examples kept"
            at = np.searchsorted(kept, mine[got])
            learned += len(got)
            same_bits(result.scores[at], own.scores, f"{what}: key {k}: predictions")
            same_bits(result.losses[at], own.losses, f"{what}: key {k}: losses")
            same_bits(seen[at], start + np.cumsum(~part_served[mine[got]]),
                       f"{what}: key {k}: examples seen after each")
        assert refused == sorted(expected_refused), f"{what}: refused {refused}"
        assert len(kept) == learned, f"{what}: examples kept that no key kept alone"
    for k, state in alone.items():
        mine = many.state_of(many.row(f"key {k}"))
        same_state(mine, state, f"{what}: key {k}")
        assert (mine.examples_seen, mine.cumulative_loss) == (
            state.examples_seen, state.cumulative_loss), f"{what}: key {k}: counters"
        assert to_arrow(mine).equals(to_arrow(state), check_metadata=True), \
            f"{what}: key {k}: Arrow form"
    # the Arrow forms of every model, in any order, in one call, as each alone's (names are
    # shared by some models: runs of them are looked up once)
    order = [list(alone)[i] for i in rng.permutation(len(alone))]
    some = FeatureNames.from_arrays(np.arange(0, dim, 2), pa.array([f"f{i}" for i in
                                                                    range(0, dim, 2)]))
    names = [some if i % 3 else FeatureNames() for i in range(len(order))]
    extras = [{"model_key": f"key {k}"} if i % 2 else None for i, k in enumerate(order)]
    tables = many.tables(many.rows([f"key {k}" for k in order]), names, extras)
    for k, table, name, extra in zip(order, tables, names, extras):
        state = alone[k].copy()
        state.feature_names = name
        assert table.equals(to_arrow(state, extra), check_metadata=True), \
            f"{what}: key {k}: Arrow form among many"


# --- serving: a prediction that reads the model and writes nothing -------------------------

# Serving's model: learned on features 0..SEEN-1 of a space of SERVING_DIM (sparse, scales
# 10^-3..10^3); the batches served carry those and features the model has not seen.
SERVING_DIM, SEEN = 64, 7


def _serving_model(algorithm, n_classes=1, loss="logistic"):
    """(the running model, its checkpoint as read back): the learner after 200 examples of
    ``stream``'s features 0..SEEN-1 (the last one the bias)."""
    X, y = stream(n=200, d=SEEN - 1)
    labels = y if n_classes == 1 else np.where(y > 0, 1.0, 2.0 + np.arange(len(y)) % 2)
    state = new_state(algorithm, SERVING_DIM, loss, n_classes=n_classes)
    learn(state, dense_batch(X, labels, bias=False))
    return state, from_arrow(to_arrow(state))


def _serving_batch(rng, n, lowest=0, highest=SERVING_DIM):
    """``n`` unlabeled examples of 1 to 6 features drawn from lowest..highest-1 (a feature twice
    in some, in any order), values of scales 10^-4..10^4."""
    lens = rng.integers(1, 7, n)
    indices = rng.integers(lowest, highest, lens.sum())
    values = rng.normal(size=lens.sum()) * 10.0 ** rng.integers(-4, 5, lens.sum())
    return make_batch(np.concatenate([[0], np.cumsum(lens)]), indices, values, np.full(n, np.nan))


def _served_in_place(model, batch):
    """What training's serving predicts (``learn_or_refuse`` with every example served: slots
    given to the new features, the arrays grown, the step run and undone, on the model
    itself), on a copy of the model."""
    copy = model.copy()
    rows, result, refused = learn_or_refuse(copy, batch, np.ones(len(batch), dtype=np.bool_))
    assert not refused and rows.tolist() == list(range(len(batch))), f"refused: {refused}"
    return result.scores


def _model_unchanged(model, before, what):
    """The model is what pickled to ``before``: its slots, arrays, scalars and counters."""
    after = pickle.loads(before)
    assert model.n_slots == after.n_slots, \
        f"{what}: the model went from {after.n_slots} slots to {model.n_slots}"
    for name in ("slot_index", "table", "V", "M", "S"):
        same_bits(getattr(model, name), getattr(after, name), f"{what}: the model's {name}")
    assert pickle.dumps(model) == before, f"{what}: the model's pickle changed"


def check_predict_next_writes_nothing(algorithm: str) -> None:
    """``predict_next`` gives bit for bit what training's in-place serving gives, and writes
    nothing: on the running model and its checkpoint, binary and 3 one-against-all classes,
    logistic and absolute loss, on batches of the features seen only, of features never seen
    only, of both (a feature twice in an example, an example without features, values 10^4
    times any seen), of one example; the model's slots, arrays and pickle are as before."""
    rng = np.random.default_rng(12)
    for n_classes, loss in ((1, "logistic"), (3, "logistic"), (1, "absolute")):
        for form, model in zip(("running model", "checkpoint"),
                               _serving_model(algorithm, n_classes, loss)):
            before = pickle.dumps(model)
            batches = {"seen features": _serving_batch(rng, 30, highest=SEEN),
                       "unseen features": _serving_batch(rng, 30, lowest=SEEN),
                       "both": _serving_batch(rng, 60),
                       "one example": _serving_batch(rng, 1),
                       "an example without features": make_batch(
                           np.array([0, 2, 2, 3]), np.array([1, 40, 50]),
                           np.array([3.0, -2.0, 1e4]), np.full(3, np.nan))}
            for case, batch in batches.items():
                what = f"{form}, {n_classes} class(es), {loss}, {case}"
                served = predict_next(model, batch)
                expected = _served_in_place(model, batch)
                same_bits(served, expected, f"{what}: predictions vs training's serving")
                _model_unchanged(model, before, what)


SERVING_THREADS, BATCHES_PER_THREAD, BATCH_SIZE = 4, 20, 10


def check_one_model_serves_many_threads(algorithm: str) -> None:
    """SERVING_THREADS threads scoring through one model at once, each its own batches
    (BATCHES_PER_THREAD of BATCH_SIZE: 800 predictions a learner) of features the model has
    not seen among ones it has, get bit for bit what each batch gets scored alone, and the
    model is unchanged (slots, arrays, pickle). Threads switch every 1 µs meanwhile, so that a
    call run between another's writes to anything they share would show (a scratch view shared
    between calls shows in every learner). Each batch is first scored alone, on one thread,
    and the model checked then: a model that serving writes to fails there, before threads
    that race on it could loop forever or fail in ways a test cannot report."""
    _, model = _serving_model(algorithm)
    rng = np.random.default_rng(13)
    work = [[_serving_batch(rng, BATCH_SIZE, highest=3 * SEEN)
             for _ in range(BATCHES_PER_THREAD)] for _ in range(SERVING_THREADS)]
    before = pickle.dumps(model)
    alone = [[predict_next(model, b) for b in batches] for batches in work]
    _model_unchanged(model, before, "after serving each batch alone")
    start = threading.Barrier(SERVING_THREADS)

    def serve(batches):
        start.wait()
        return [predict_next(model, b) for b in batches]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(SERVING_THREADS) as pool:
            shared = list(pool.map(serve, work))
    finally:
        sys.setswitchinterval(interval)
    differ = sum(int((s != a).any(axis=1).sum()) for got, want in zip(shared, alone)
                 for s, a in zip(got, want))
    assert differ == 0, (f"{differ} of {SERVING_THREADS * BATCHES_PER_THREAD * BATCH_SIZE} "
                         f"predictions differ from each batch's alone")
    _model_unchanged(model, before, "after serving threads")
