"""The blocks of a NumPy loop on two threads.

NumPy releases the GIL inside its ufunc loops and copies, so the independent blocks of a
batch (a few images each, whose passes write disjoint slices of one output) can run side
by side: the calling thread takes the first half of the blocks and one pool worker the
second. Results are the same bits as one thread's (each block's arithmetic is unchanged).
Used by interpolation's passes, max pooling's tiled windows and separable stages, the
halves of a depthwise convolution's batch (:func:`batch_halves`), the copies of nearest
upsampling, pixel (un)shuffle and pad (:func:`array_halves`), and the compiled
depthwise, pooling and resampling kernels, whose serial twins release the GIL
(:func:`on_halves`).
NumPy path, forward + backward, 2 cores: bilinear x2 of (8, 32, 32, 32) float32 3.4-4.2
-> 2.7-2.9 ms (align_corners 6.3-6.7 -> 3.8-4.0); max pool 3x3/2 of (32, 32, 32, 32)
float32 4.7-5.4 -> 3.1-3.5 ms, float64 8.1-8.7 -> 6.3-6.5 ms (with 1 MB blocks).

``HANDGRAD_NUMPY_THREADS=1`` keeps every loop on the calling thread; the default is 2
where the process may use two cores or more. The worker is created on first use; a
forked child creates its own. Several threads may call in at once: their second halves
queue on the one worker, which never waits on anything itself.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

_WORKER_NAME = "handgrad-blocks"


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def _threads_from_env():
    value = os.environ.get("HANDGRAD_NUMPY_THREADS", "")
    if value == "":
        return min(2, _cores())
    if value not in ("1", "2"):
        raise ValueError(f"HANDGRAD_NUMPY_THREADS must be 1 or 2; received {value!r}")
    return int(value)


THREADS = _threads_from_env()
_state = {"pool": None, "lock": threading.Lock()}


def _forget_pool_after_fork():
    """A forked child has no worker thread: it makes its own on first use."""
    _state["pool"], _state["lock"] = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _pool():
    with _state["lock"]:
        if _state["pool"] is None:
            _state["pool"] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=_WORKER_NAME)
        return _state["pool"]


MIN_HALF_BYTES = 1 << 20
"""A batch is split in halves for two threads when its output has twice this many bytes."""


def batch_halves(n, nbytes, min_half=None):
    """Slices for :func:`run_blocks`: the two halves of a batch of ``n`` when two threads
    run and the output takes twice ``min_half`` bytes or more (default
    ``MIN_HALF_BYTES``: less work than that gains less than a hand-over costs), else the
    whole batch."""
    min_half = MIN_HALF_BYTES if min_half is None else min_half
    if THREADS < 2 or n < 2 or nbytes < 2 * min_half:
        return [slice(0, n)]
    return [slice(0, (n + 1) // 2), slice((n + 1) // 2, n)]


def array_halves(xp, n, nbytes):
    """:func:`batch_halves` for NumPy arrays (``xp`` is numpy); the whole batch for
    another array module (a GPU runs each op as one launch and has no cache to fit)."""
    return batch_halves(n, nbytes) if xp is np else [slice(0, n)]


def on_halves(n, nbytes, run_part, run_whole):
    """``[run_part(images) for each half]`` of a NumPy batch of ``n`` whose output takes
    ``nbytes``, on the two threads, where the batch splits (:func:`batch_halves`); else
    ``[run_whole()]``. For the compiled kernels, which release the GIL: their serial twins
    on the halves beat numba's parallel launch on short calls (see
    :mod:`._engine.dispatch`)."""
    halves = batch_halves(n, nbytes)
    return [run_whole()] if len(halves) == 1 else run_blocks(run_part, halves)


def _run_all(work, blocks):
    return [work(block) for block in blocks]


def run_blocks(work, blocks):
    """``[work(block) for block in blocks]``; with two threads the second half runs on
    the worker while this thread runs the first. An error in either half is raised here,
    after both halves have stopped."""
    blocks = list(blocks)
    on_worker = threading.current_thread().name.startswith(_WORKER_NAME)
    if THREADS < 2 or len(blocks) < 2 or on_worker:
        return _run_all(work, blocks)
    half = (len(blocks) + 1) // 2
    future = _pool().submit(_run_all, work, blocks[half:])
    try:
        first = _run_all(work, blocks[:half])
    finally:
        error = future.exception()  # waits for the worker's half
    if error is not None:
        raise error
    return first + future.result()
