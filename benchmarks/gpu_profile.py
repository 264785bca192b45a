"""Where a training step's time goes on the device (:mod:`benchmarks.gpu`): per layer
class, the forward and backward milliseconds (each call synchronized), and for a whole
step the host's time against the GPU's (``cupyx.profiler.benchmark``): a step whose GPU
time is far below its host time is bound by launches and host syncs, not by kernels."""

from __future__ import annotations

import time
from collections import defaultdict


def _leaves(model):
    return [layer for _, layer in model.walk() if not list(layer.children())]


def layer_breakdown(model, step, sync, rounds=3) -> list[dict]:
    """Rows ``{layer, calls, forward_ms, backward_ms}`` per leaf layer class, summed over
    one step (the median-free mean of ``rounds`` steps), slowest first, then a row
    ``other`` for the rest of the step (loss, optimizer, graph bookkeeping)."""
    totals = defaultdict(lambda: [0, 0.0, 0.0])

    def timed(layer, name, index):
        inner = getattr(layer, name)

        def wrapper(*args, **kwargs):
            sync()
            start = time.perf_counter()
            out = inner(*args, **kwargs)
            sync()
            row = totals[type(layer).__name__]
            row[index] += time.perf_counter() - start
            row[0] += index == 1
            return out
        return wrapper

    leaves = _leaves(model)
    for layer in leaves:  # instance attributes shadow the class's methods
        layer.forward, layer.backward = timed(layer, "forward", 1), timed(layer, "backward", 2)
    try:
        step()  # warm-up, not counted
        totals.clear()
        sync()
        start = time.perf_counter()
        for _ in range(rounds):
            step()
        sync()
        total = (time.perf_counter() - start) / rounds
    finally:
        for layer in leaves:
            del layer.forward, layer.backward
    rows = [{"layer": name, "calls": calls // rounds, "forward_ms": round(1e3 * f / rounds, 2),
             "backward_ms": round(1e3 * b / rounds, 2)}
            for name, (calls, f, b) in totals.items()]
    rows.sort(key=lambda r: -(r["forward_ms"] + r["backward_ms"]))
    inside = sum(r["forward_ms"] + r["backward_ms"] for r in rows)
    rows.append({"layer": "other (loss, optimizer, graph)", "calls": 1,
                 "forward_ms": round(1e3 * total - inside, 2), "backward_ms": 0.0})
    return rows


def host_and_gpu_ms(step, dry, repeat=20) -> dict:
    """A step's host milliseconds and GPU milliseconds (CUDA events around it); on the
    dry run both are the wall time."""
    if dry:
        start = time.perf_counter()
        for _ in range(repeat):
            step()
        ms = 1e3 * (time.perf_counter() - start) / repeat
        return {"host_ms": round(ms, 2), "gpu_ms": round(ms, 2)}
    from cupyx.profiler import benchmark
    result = benchmark(step, n_repeat=repeat, n_warmup=2)
    return {"host_ms": round(1e3 * float(result.cpu_times.mean()), 2),
            "gpu_ms": round(1e3 * float(result.gpu_times.mean()), 2)}
