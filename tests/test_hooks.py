"""``Layer.register_forward_hook`` / ``register_backward_hook``: the arguments on leaves,
``Sequential``, graph ``Model``, nested containers and shared layers; handles; hooks on a
model vs on its children; eval mode with ``grad=True``; per-instance (threads, copies);
``register_communicator``; the data-parallel reducer's readiness hook."""

from __future__ import annotations

import copy
import itertools
import threading

import numpy as np
import pytest

import handgrad as hg
import handgrad.distributed as dist
from handgrad import layers as L
from handgrad.model import Sequential


def record(layers, log):
    """Forward and backward hooks on ``layers`` appending (kind, name, arg, result)."""
    handles = []
    for layer in layers:
        handles.append(layer.register_forward_hook(
            lambda lay, x, y: log.append(("forward", lay.name, x, y))))
        handles.append(layer.register_backward_hook(
            lambda lay, dy, dx: log.append(("backward", lay.name, dy, dx))))
    return handles


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_a_leaf_s_hooks_get_its_input_output_and_gradients():
    layer = L.Dense(3, name="fc", dtype="float64", seed=0)
    x, dy = randn(4, 2), randn(4, 3, seed=1)
    log, seen = [], {}
    record([layer], log)
    layer.register_backward_hook(
        lambda lay, dy_, dx_: seen.update({k: g.copy() for k, g in lay.gradients.items()}))
    y = layer.forward(x)
    dx = layer.backward(dy)
    assert [entry[:2] for entry in log] == [("forward", "fc"), ("backward", "fc")]
    assert log[0][2] is x and log[0][3] is y
    assert log[1][2] is dy and log[1][3] is dx
    for key, grad in layer.gradients.items():  # already accumulated when the hook ran
        assert np.any(grad) and np.array_equal(seen[key], grad)


def test_sequential_hooks_on_the_model_and_on_its_children():
    model = Sequential([L.Dense(4, name="a"), L.Tanh(name="t"), L.Dense(2, name="b")],
                       input_shape=(3,), dtype="float64", seed=0, name="net")
    outer, inner = [], []
    record([model], outer)
    record(model.layers, inner)
    x = randn(5, 3)
    y = model.forward(x)
    dx = model.backward(np.ones_like(y))
    assert [(k, n) for k, n, *_ in outer] == [("forward", "net"), ("backward", "net")]
    assert outer[0][2] is x and outer[0][3] is y and outer[1][3] is dx
    assert [(k, n) for k, n, *_ in inner] == [
        ("forward", "a"), ("forward", "t"), ("forward", "b"),
        ("backward", "b"), ("backward", "t"), ("backward", "a")]
    forwards = [entry for entry in inner if entry[0] == "forward"]
    assert forwards[0][2] is x and forwards[-1][3] is y
    for earlier, later in itertools.pairwise(forwards):
        assert later[2] is earlier[3]  # each child's input is the previous child's output
    backwards = [entry for entry in inner if entry[0] == "backward"]
    assert backwards[-1][3] is dx
    for earlier, later in itertools.pairwise(backwards):
        assert later[2] is earlier[3]


def shared_graph():
    """``x -> a -> s -> tanh -> s -> out``: the Dense ``s`` called twice."""
    x = hg.Input((3,), name="x")
    shared = L.Dense(3, name="s")
    y = L.Dense(2, name="out")(shared(L.Tanh(name="t")(shared(L.Dense(3, name="a")(x)))))
    return hg.Model(x, y, dtype="float64", seed=0, name="graph")


def test_a_shared_layer_s_hooks_run_once_per_call_in_a_graph():
    model = shared_graph()
    log = []
    record([model.get_layer("s")], log)
    x = randn(4, 3)
    model.forward(x)
    first_in, first_out = log[0][2], log[0][3]
    second_in = log[1][2]
    assert np.array_equal(second_in, np.tanh(first_out))  # the second call's input
    assert first_in.shape == (4, 3) and len(log) == 2
    model.backward(np.ones((4, 2)))
    assert [k for k, *_ in log] == ["forward", "forward", "backward", "backward"]
    # backward pairs latest first: the second call's dx is tanh's dy
    assert log[2][3].shape == log[3][2].shape == (4, 3)


def test_graph_model_hooks_see_its_inputs_as_passed():
    a, b = hg.Input((3,), name="a"), hg.Input((2,), name="b")
    model = hg.Model([a, b], L.Concatenate(name="cat")([L.Dense(2, name="d")(a), b]),
                     dtype="float64", seed=0, name="two")
    log = []
    record([model, model.get_layer("cat")], log)
    inputs = {"a": randn(4, 3), "b": randn(4, 2)}
    y = model.forward(inputs)
    dx = model.backward(np.ones_like(y))
    assert [(k, n) for k, n, *_ in log] == [("forward", "cat"), ("forward", "two"),
                                            ("backward", "cat"), ("backward", "two")]
    assert log[1][2] is inputs and log[1][3] is y and log[3][3] is dx
    assert isinstance(log[0][2], list) and log[0][2][1] is inputs["b"]  # a merge: a list


def test_nested_containers_call_each_level_once_inner_first():
    block = Sequential([L.Dense(3, name="fc"), L.ReLU(name="relu")], name="block")
    x = hg.Input((3,), name="x")
    graph = hg.Model(x, L.Dense(3, name="g")(block(x)), name="graph")
    model = Sequential([graph, L.Dense(2, name="head")], input_shape=(3,), name="top")
    log = []
    record([layer for _, layer in model.walk()], log)
    y = model.forward(randn(2, 3).astype(np.float32))
    model.backward(np.ones_like(y))
    names = [(k[0], n) for k, n, *_ in log]
    assert names == [("f", "fc"), ("f", "relu"), ("f", "block"), ("f", "g"), ("f", "graph"),
                     ("f", "head"), ("f", "top"),
                     ("b", "head"), ("b", "g"), ("b", "relu"), ("b", "fc"), ("b", "block"),
                     ("b", "graph"), ("b", "top")]


@pytest.mark.parametrize("make, x", [
    (lambda: L.LSTM(4, name="rnn"), randn(2, 5, 3)),
    (lambda: L.MultiHeadAttention(4, 2, name="mha"), randn(2, 5, 4)),
    (lambda: L.Embedding(7, 3, name="emb"), np.array([[1, 2], [3, 6]])),
])
def test_layers_overriding_forward_call_their_hooks_once(make, x):
    layer = make()
    layer.build(x.shape[1:], np.random.default_rng(0), "float64")
    log = []
    record([layer], log)
    y = layer.forward(x)
    layer.backward(np.ones_like(y))
    assert [k for k, *_ in log] == ["forward", "backward"]
    assert log[0][2] is x and log[0][3] is y


def test_a_forward_calling_super_forward_calls_the_hooks_once():
    class Scaled(L.Dense):
        def forward(self, x, training=True, grad=None):
            return 2 * super().forward(x, training, grad)

    layer = Scaled(2, name="scaled", dtype="float64", seed=0)
    log = []
    record([layer], log)
    y = layer.forward(randn(3, 2))
    assert len(log) == 1 and log[0][3] is y  # the outermost forward's output


def test_handles_remove_and_work_as_context_managers():
    layer = L.Tanh(name="t")
    calls = []
    handle = layer.register_forward_hook(lambda *args: calls.append("a"))
    with layer.register_forward_hook(lambda *args: calls.append("b")):
        layer.forward(np.ones((1, 2)))
    layer.forward(np.ones((1, 2)))
    handle.remove()
    handle.remove()  # again: nothing happens
    layer.forward(np.ones((1, 2)))
    assert calls == ["a", "b", "a"]


def test_hooks_run_in_eval_mode_with_grad():
    model = Sequential([L.Dense(3, name="d"), L.Dropout(0.5, name="drop")],
                       input_shape=(2,), dtype="float64", seed=0)
    log = []
    record(model.layers, log)
    x = randn(4, 2)
    y = model.forward(x, training=False, grad=True)
    model.backward(np.ones_like(y))
    assert [(k, n) for k, n, *_ in log] == [("forward", "d"), ("forward", "drop"),
                                            ("backward", "drop"), ("backward", "d")]
    assert log[1][3] is log[1][2]  # evaluation: dropout is the identity


def test_bad_hooks_are_clear_errors():
    layer = L.Tanh(name="t")
    with pytest.raises(TypeError, match=r"register_forward_hook: 'fn' must be callable; "
                                        r"received 3 \(int\)"):
        layer.register_forward_hook(3)
    with pytest.raises(TypeError, match="register_backward_hook: 'fn' must be callable"):
        layer.register_backward_hook(None)
    layer.register_forward_hook(lambda lay, x, y: y * 2)
    with pytest.raises(TypeError, match="a forward hook must return None"):
        layer.forward(np.ones((1, 2)))


def test_hooks_are_per_instance_across_threads_and_copies():
    def make():
        return Sequential([L.Dense(3, name="d"), L.ReLU(name="r")], input_shape=(2,),
                          dtype="float64", seed=0)

    watched, other = make(), make()
    seen = []
    watched.register_forward_hook(lambda lay, x, y: seen.append(threading.get_ident()))
    twin = copy.deepcopy(watched)  # a copy starts without hooks

    def run(model):
        for _ in range(20):
            model.forward(randn(3, 2))

    threads = [threading.Thread(target=run, args=(m,)) for m in (watched, other, twin)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(seen) == 20 and set(seen) == {threads[0].ident}


class Communicator:
    def __init__(self, rows):
        self.rows = rows

    @staticmethod
    def allreduce(array):
        return np.array(array, copy=True)


def test_register_communicator():
    drop = L.Dropout(0.5, name="drop")
    assert drop.needs_communicator and drop.communicator is None
    first, second = Communicator((0, 4)), Communicator((2, 4))
    handle = drop.register_communicator(first)
    with drop.register_communicator(second):
        assert drop.communicator is second
    assert drop.communicator is first
    handle.remove()
    assert drop.communicator is None
    assert "communicator" not in vars(drop)  # a property, not an instance attribute
    with pytest.raises(TypeError, match="Dense 'fc' takes no communicator"):
        L.Dense(2, name="fc").register_communicator(first)
    with pytest.raises(TypeError, match=r"'communicator' must have an allreduce\(array\)"):
        drop.register_communicator(object())


class FakeMPI:
    """The few names of mpi4py's MPI that GradientReducer uses, recording launches."""

    IN_PLACE = SUM = None

    class Request:
        Testall = Waitall = staticmethod(lambda requests: None)

    def __init__(self, log):
        self.log = log

    def Iallreduce(self, send, buffer, op):
        self.log.append(("launch", buffer))
        return object()


def test_reducer_starts_a_bucket_when_its_layers_consumed_their_last_cache(monkeypatch):
    model = shared_graph()
    log = []
    for name in ("a", "s", "out"):
        model.get_layer(name).register_backward_hook(
            lambda lay, dy, dx: log.append(("backward", lay.name)))
    fake = FakeMPI(log)
    monkeypatch.setattr(dist.comm, "enabled", lambda: True)
    monkeypatch.setattr(dist.comm, "mpi", lambda: (fake, fake))
    before = {name: set(vars(layer)) for name, layer in model.walk()}
    with dist.GradientReducer(model, bucket_bytes=1) as reducer:
        buffers = [bucket.buffer for bucket in reducer.buckets]
        assert [[lay.name for lay in b.layers] for b in reducer.buckets] == [["out"], ["s"],
                                                                              ["a"]]
        model.forward(randn(4, 3))
        model.backward(np.ones((4, 2)))
        def bucket(buffer):
            return next(i for i, other in enumerate(buffers) if other is buffer)

        # out's bucket after out; s's only after its second backward (its last cache)
        assert [e if e[0] == "backward" else ("launch", bucket(e[1]))
                for e in log] == [("backward", "out"), ("launch", 0), ("backward", "s"),
                                  ("backward", "s"), ("launch", 1), ("backward", "a"),
                                  ("launch", 2)]
        reducer.reduce()
    log.clear()
    model.forward(randn(4, 3))
    model.backward(np.ones((4, 2)))
    assert all(entry[0] == "backward" for entry in log)  # closed: its hooks are gone
    # nothing was written into the layers beyond their own registries
    after = {name: set(vars(layer)) for name, layer in model.walk()}
    assert all(after[name] - before[name] <= {"_hooks_running"} for name in after)
