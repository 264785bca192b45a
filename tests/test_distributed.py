"""handgrad.distributed in one process: shares, the global-batch kernels, the API before
``init`` and ``fit(distributed=True)`` as one process of one.

The global-batch kernels are checked with K threads standing for K processes: each
runs the op on its share, and ``allreduce`` sums the threads' arrays (a barrier-based
reduction), which is what MPI's allreduce does across processes. The results must be the
one-process op on the whole batch, up to the order of the sums (tolerances measured on
the case with ``condition_bounds``). The MPI runs are in ``test_distributed_mpi.py``.
"""

from __future__ import annotations

import itertools
import sys
import threading

import numpy as np
import pytest

import handgrad.distributed as dist
from handgrad import layers as L
from handgrad import ops
from handgrad.model import Sequential
from handgrad.testing import assert_close

from tolerances import assert_outputs_close, condition_bounds


# ------------------------------------------------------------------------- shares
@pytest.mark.parametrize("count", [0, 1, 2, 7, 10, 64])
@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_shares_cover_the_batch_in_order_and_differ_by_at_most_one(count, size):
    parts = [dist.shard(count, rank, size) for rank in range(size)]
    assert [p.stop - p.start for p in parts] == dist.shard_sizes(count, size)
    assert np.array_equal(np.concatenate([np.arange(count)[p] for p in parts]),
                          np.arange(count))
    sizes = dist.shard_sizes(count, size)
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == count


@pytest.mark.parametrize("call, error, match", [
    (lambda: dist.shard(-1), ValueError, "'count' must be an int >= 0"),
    (lambda: dist.shard(2.0), TypeError, "'count' must be an int >= 0"),
    (lambda: dist.shard(4, rank=3, size=3), ValueError, r"'rank' must be an int in \[0, 3\)"),
    (lambda: dist.shard_sizes(4, size=0), ValueError, "'size' must be an int >= 1"),
])
def test_bad_shares_are_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ------------------------------------------------------- K threads, one batch
class ThreadGroup:
    """K threads that sum arrays like MPI's allreduce over K processes."""

    def __init__(self, k):
        self.k, self.barrier, self.parts = k, threading.Barrier(k, timeout=30), [None] * k

    def allreduce_of(self, rank):
        def allreduce(array):
            self.parts[rank] = np.array(array)
            self.barrier.wait()
            total = sum(self.parts[1:], self.parts[0].copy())
            self.barrier.wait()
            return total
        return allreduce

    def run(self, work):
        """``[work(rank, allreduce) for each rank]``, run by K threads at once."""
        results, errors = [None] * self.k, []

        def target(rank):
            try:
                results[rank] = work(rank, self.allreduce_of(rank))
            except BaseException as error:  # re-raised below
                errors.append(error)
                self.barrier.abort()

        threads = [threading.Thread(target=target, args=(rank,)) for rank in range(self.k)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        if errors:
            raise errors[0]
        return results


def batch_norm_outputs(x, gamma, beta, dy, sizes=None, dtype=np.float64):
    """y, dx, dgamma, dbeta and the running statistics of batch norm on ``x`` in
    ``dtype``: in one process (``sizes`` None) or in ``len(sizes)`` threads holding
    ``sizes`` rows each (dgamma, dbeta summed over the threads)."""
    x, dy = x.astype(dtype), dy.astype(dtype)
    gamma, beta = gamma.astype(dtype), beta.astype(dtype)

    def work(rows, allreduce):
        mean, var = np.full(x.shape[-1], 0.5, dtype), np.full(x.shape[-1], 2.0, dtype)
        y, cache = ops.batch_norm(x[rows], gamma, beta, mean, var, momentum=0.3,
                                  allreduce=allreduce)
        return (y, *ops.batch_norm_backward(dy[rows], cache), mean, var)

    if sizes is None:
        parts = [work(slice(None), None)]
    else:
        starts = np.cumsum([0, *sizes])
        parts = ThreadGroup(len(sizes)).run(
            lambda rank, allreduce: work(slice(starts[rank], starts[rank + 1]), allreduce))
        for part in parts[1:]:  # every thread updated its running statistics alike
            assert np.array_equal(part[4], parts[0][4]) and np.array_equal(part[5], parts[0][5])
    return {"y": np.concatenate([p[0] for p in parts]),
            "dx": np.concatenate([p[1] for p in parts]),
            "dgamma": sum(p[2] for p in parts), "dbeta": sum(p[3] for p in parts),
            "running_mean": parts[0][4], "running_var": parts[0][5]}


BATCH_NORM_CASES = [((7, 5, 3), [4, 3]), ((7, 5, 3), [3, 2, 2]), ((7, 5, 3), [7, 0, 0]),
                    ((9, 4, 4, 2), [2, 3, 2, 2]), ((3, 4), [1, 1, 1]), ((3, 4), [1, 1, 1, 0])]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, sizes", BATCH_NORM_CASES)
def test_batch_norm_of_a_shared_batch_is_the_batch_norm_of_the_whole(shape, sizes, dtype):
    rng = np.random.default_rng(len(sizes) + len(shape))
    x = rng.standard_normal(shape) * 3 + 1
    dy = rng.standard_normal(shape)
    gamma, beta = rng.uniform(0.5, 1.5, shape[-1]), rng.standard_normal(shape[-1])
    expected = batch_norm_outputs(x, gamma, beta, dy, dtype=dtype)
    bounds = condition_bounds(lambda: batch_norm_outputs(x, gamma, beta, dy), [x, dy, gamma])
    assert_outputs_close(batch_norm_outputs(x, gamma, beta, dy, sizes, dtype), expected,
                         bounds, dtype)
    if 1 < sizes[0] < shape[0]:  # the check can fail: a share's own statistics differ
        local = batch_norm_outputs(x[:sizes[0]], gamma, beta, dy[:sizes[0]], dtype=dtype)
        assert not np.allclose(local["y"], expected["y"][:sizes[0]], atol=1e-3)


def test_a_shared_batch_of_one_value_per_channel_is_refused():
    group = ThreadGroup(2)
    x = np.ones((1, 3))

    def work(rank, allreduce):
        return ops.batch_norm(x[:1 - rank], allreduce=allreduce)

    with pytest.raises(ValueError, match=r"more than 1 value per channel .*global batch"):
        group.run(work)
    with pytest.raises(TypeError, match="'allreduce' must be None or a function"):
        ops.batch_norm(np.ones((4, 3)), allreduce=3)


@pytest.mark.parametrize("shape, sizes", [((10, 3, 2), [4, 3, 3]), ((5, 4), [3, 2]),
                                          ((3, 2), [2, 1, 0])])
def test_dropout_rows_of_a_global_batch_get_the_whole_batch_mask(shape, sizes):
    x = np.random.default_rng(0).standard_normal(shape)
    whole, cache = ops.dropout(x, 0.4, np.random.default_rng(9))
    bounds = list(itertools.pairwise(np.cumsum([0, *sizes])))
    parts = [ops.dropout(x[a:b], 0.4, np.random.default_rng(9), rows=(int(a), shape[0]))
             for a, b in bounds]
    assert np.array_equal(np.concatenate([y for y, _ in parts]), whole)
    dy = np.ones(shape)
    assert np.array_equal(np.concatenate([ops.dropout_backward(dy[a:b], c) for (a, b), (_, c)
                                          in zip(bounds, parts)]),
                          ops.dropout_backward(dy, cache))
    # the check can fail: a mask drawn for the second share alone is another mask
    (a, b) = bounds[1]
    alone, _ = ops.dropout(x[a:b], 0.4, np.random.default_rng(9))
    assert not np.array_equal(alone, whole[a:b])


@pytest.mark.parametrize("rows, error, match", [
    ((0, 3), ValueError, r"start \+ N <= total"), ((-1, 9), ValueError, "0 <= start"),
    ((0,), TypeError, "pair of ints"), ((0.0, 4), TypeError, "pair of ints")])
def test_bad_dropout_rows_are_clear_errors(rows, error, match):
    with pytest.raises(error, match=match):
        ops.dropout(np.ones((4, 2)), 0.5, 0, rows=rows)


class Shared:
    """A layer communicator of one thread of a :class:`ThreadGroup`."""

    def __init__(self, allreduce, rows):
        self.allreduce, self.rows = allreduce, rows


def test_batch_norm_and_dropout_layers_use_their_communicator():
    def make():
        return Sequential([L.Dense(6), L.BatchNorm(), L.Dropout(0.5, seed=2), L.Dense(2)],
                          seed=0, input_shape=(4,), dtype="float64")

    rng = np.random.default_rng(1)
    x, dy = rng.standard_normal((9, 4)), rng.standard_normal((9, 2))
    one = make()
    expected = one.forward(x)
    dx = one.backward(dy)
    sizes = [4, 3, 2]
    starts = np.cumsum([0, *sizes])
    models = [make() for _ in sizes]

    def work(rank, allreduce):
        model, rows = models[rank], slice(starts[rank], starts[rank + 1])
        for layer in (model[1], model[2]):
            layer.register_communicator(Shared(allreduce, (int(starts[rank]), 9)))
        y = model.forward(x[rows])
        return y, model.backward(dy[rows])

    parts = ThreadGroup(3).run(work)
    # The same sums over the 9 rows, taken in another order (3 partial sums): the error
    # bound of a 9-term float64 sum, at the size of its terms.
    # |x_hat| <= sqrt(N - 1) over a batch of N = 9, doubled by dropout 0.5: the hidden size
    terms = {"x": np.abs(x).max(), "y": np.abs(expected).max(), "dy": np.abs(dy).max(),
             "hidden": 2 * np.sqrt(8)}
    assert_close(np.concatenate([y for y, _ in parts]), expected, terms=9,
                 scale=terms["y"] * terms["x"])
    assert_close(np.concatenate([d for _, d in parts]), dx, terms=9,
                 scale=terms["dy"] * terms["y"] * terms["x"])
    total = {k: sum(m.named_gradients()[k] for m in models) for k in one.named_gradients()}
    for key, grad in one.named_gradients().items():
        assert_close(total[key], grad, terms=9,
                     scale=9 * terms["dy"] * max(terms["x"], terms["y"], terms["hidden"]))
    # inference ignores the communicator: running statistics, no dropout
    assert np.array_equal(models[0].forward(x, training=False), one.forward(x, training=False))


# ----------------------------------------------------------- before init()
def test_one_process_before_init():
    assert not dist.is_initialized() and not dist.enabled()
    assert (dist.rank(), dist.size()) == (0, 1)
    value = np.arange(3.0)
    total = dist.allreduce(value, op="max")
    assert np.array_equal(total, value) and total is not value
    assert dist.allreduce(2) == 2.0 and isinstance(dist.allreduce(2), float)
    assert dist.allgather({"a": 1}) == [{"a": 1}] and dist.broadcast("x") == "x"
    dist.barrier()
    dist.check_same("test", {"n": 3})
    with pytest.raises(ValueError, match="'op' must be one of 'sum', 'max', 'min'"):
        dist.allreduce(value, op="prod")
    with pytest.raises(TypeError, match="'value' must be a number or a numeric NumPy array"):
        dist.allreduce("3")


def test_the_reducer_changes_nothing_in_one_process():
    model = Sequential([L.Dense(3), L.BatchNorm(), L.Dense(2)], seed=0, input_shape=(4,))
    grads = model.named_gradients()
    with dist.GradientReducer(model) as reducer:
        assert reducer.batch(10) == slice(0, 10) and reducer.weight == 1.0
        assert reducer.buckets == [] and reducer.nbytes == 0
        reducer.reduce()
        assert reducer.mean({"loss": 0.25, "acc": 1.0}) == {"loss": 0.25, "acc": 1.0}
        assert model[1].communicator is None  # nothing to share with
    assert all(model.named_gradients()[k] is v for k, v in grads.items())
    with pytest.raises(RuntimeError, match="the reducer is closed"):
        reducer.batch(3)


def test_init_without_mpi4py_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[mpi\]"'):
        dist.init()
    assert not dist.is_initialized()


@pytest.mark.parametrize("layer, match", [
    (L.MultiHeadAttention(4, 2, dropout=0.1), "draws dropout masks per process"),
    (L.InstanceNorm(track_running_stats=True), "averages its running statistics"),
])
def test_layers_that_depend_on_the_split_are_refused(layer, match):
    model = Sequential([layer], seed=0, input_shape=(5, 4))
    with pytest.raises(ValueError, match=match):
        dist.GradientReducer(model)
    with pytest.raises(ValueError, match="build the model first"):
        dist.broadcast_parameters(Sequential([L.Dense(2)]))


# ------------------------------------------ fit(distributed=True), one process
@pytest.fixture
def one_process_job(monkeypatch):
    """``fit(distributed=True)`` as rank 0 of 1 without starting MPI in pytest."""
    monkeypatch.setattr(dist, "init", lambda: None)
    yield
    assert not dist.is_initialized()


def _model():
    model = Sequential([L.Conv1D(4, 3), L.BatchNorm(), L.ReLU(), L.Dropout(0.3, seed=1),
                        L.Flatten(), L.Dense(3)], seed=0, input_shape=(6, 2), dtype="float64")
    return model.compile("adam", "cross_entropy", ["accuracy"])


def test_fit_distributed_in_one_process_is_fit(one_process_job):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((30, 6, 2)), rng.integers(0, 3, 30)
    plain, shared = _model(), _model()
    a = plain.fit(x, y, epochs=2, batch_size=8, rng=3, verbose=0, validation_split=0.2)
    b = shared.fit(x, y, epochs=2, batch_size=8, rng=3, verbose=0, validation_split=0.2,
                   distributed=True)
    for key, value in plain.named_parameters().items():
        assert np.array_equal(shared.named_parameters()[key], value), key
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        np.testing.assert_allclose(b.history[key], a.history[key], rtol=4e-16 * 30, atol=0)
    assert shared.evaluate(x, y, distributed=True) == pytest.approx(plain.evaluate(x, y),
                                                                    rel=1e-14)
    assert np.array_equal(shared.predict(x, distributed=True), plain.predict(x))
    assert all(layer.communicator is None for layer in shared.layers)
    assert [layer.needs_communicator for layer in shared.layers] == [False, True, False, True,
                                                                     False, False]


def test_fit_distributed_refuses_a_custom_train_step(one_process_job):
    class Custom(Sequential):
        def train_step(self, x, y):
            return {"loss": 0.0}

    model = Custom([L.Dense(2)], seed=0, input_shape=(3,))
    model.compile("sgd", "mse", [])
    with pytest.raises(ValueError, match="distributed=True trains with the built-in"):
        model.fit(np.ones((4, 3)), np.ones((4, 2)), verbose=0, distributed=True)
    with pytest.raises(TypeError, match="'distributed' must be a bool"):
        model.fit(np.ones((4, 3)), np.ones((4, 2)), verbose=0, distributed="yes")
