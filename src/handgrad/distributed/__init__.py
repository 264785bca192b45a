"""Data-parallel training over MPI (``pip install -e ".[mpi]"``: mpi4py and MPICH's
``mpiexec``). Run a script as ``mpiexec -n K python script.py``: K processes ("ranks"),
each with the whole data set, train one model. With K processes a run trains the model
that one process trains with the same global batch, up to the order of floating-point
sums:

- every rank walks the same global batches (the same ``rng`` seed: rank 0's generator
  state is used everywhere) and takes its share of each (:func:`shard`: contiguous rows,
  shares differ by at most one example; a rank may get none);
- parameters, buffers and random generators start as rank 0's
  (:func:`broadcast_parameters`);
- each rank scales its loss gradient by ``weight = share / global batch`` (the losses
  average over their batch), so the sum over ranks is the global batch's mean gradient;
  the sum is an MPI allreduce of a few large contiguous buffers ("buckets"), each started
  (non-blocking) as soon as backward has finished the layers it holds;
- ``BatchNorm`` normalizes with the statistics of the global batch, and its backward
  allreduces ``sum(dy)`` and ``sum(dy * xhat)``; ``Dropout`` draws the mask of the whole
  global batch and keeps its rows, so masks do not depend on K;
- the optimizer then steps identically on every rank.

API (every function works before :func:`init` as one process of rank 0 of 1)::

    init()                      start MPI (once); an uncaught exception on any rank then
                                ends the whole job (MPI_Abort) with its message
    is_initialized() -> bool    enabled() -> bool: initialized and size() > 1
    rank() -> int               size() -> int
    barrier()
    allreduce(value, op="sum")  sum / max / min over ranks: a new array (same shape and
                                dtype) for an array, a float for a number
    broadcast(obj, root=0)      any picklable object, from ``root``
    allgather(obj) -> list      every rank's object, in rank order
    abort(message, code=1)      print the message and end every rank of the job (once
                                mpiexec has read the message: never lost)
    check_same(op, settings)    RankMismatchError on every rank when a dict of settings
                                (data sizes, batch size) differs between ranks
    shard(count) -> slice       this rank's rows of ``count`` examples
    shard_sizes(count) -> list  every rank's share
    broadcast_parameters(model, root=0)   parameters, buffers and layers' extra state
                                          (Dropout generators) of ``root``, in place
    GradientReducer(model, bucket_bytes=None)   (GradientReducer.BUCKET_BYTES = 2**18)
        .batch(count) -> slice  start a step on a global batch of ``count`` examples:
                                this rank's rows; sets ``.weight`` and the rows
                                whose masks Dropout keeps
        .weight                 share / count: multiply the loss gradient by it
        .reduce()               wait for every bucket: gradients are the global sum
        .mean(value)            example-weighted mean over the global batch of a float
                                or of a dict of floats (the batch's loss, accuracy)
        .close()                detach (also a context manager); .buckets, .nbytes,
                                .wait_seconds (time spent waiting in reduce)

    model.fit(..., distributed=True)      all of the above inside fit; rank 0 prints
    model.evaluate(..., distributed=True) each rank takes a share, results are reduced
    model.predict(..., distributed=True)  each rank predicts a share; all get everything

The explicit loop (``README.md``, "Data-parallel training")::

    import handgrad.distributed as dist
    dist.init()
    dist.broadcast_parameters(model)
    with dist.GradientReducer(model) as reducer:
        for xb, yb in batches(x, y, 64, rng=rng):        # the same global batches
            part = reducer.batch(len(xb))
            model.zero_grad()
            logits = model.forward(xb[part], training=True)
            loss, dlogits = losses.softmax_cross_entropy(logits, yb[part])
            model.backward(dlogits * reducer.weight)     # allreduces start here
            reducer.reduce()
            optimizer.step(model.named_parameters(), model.named_gradients())

Without mpi4py, ``import handgrad`` and everything single-process work unchanged;
:func:`init` raises an ImportError that names the fix.
"""

from .comm import (
    RankMismatchError,
    abort,
    allgather,
    allreduce,
    barrier,
    broadcast,
    check_same,
    enabled,
    init,
    is_initialized,
    rank,
    size,
)
from .reducer import GradientReducer
from .sharding import shard, shard_sizes
from .state import broadcast_parameters

__all__ = [
    "GradientReducer", "RankMismatchError", "abort", "allgather", "allreduce", "barrier",
    "broadcast", "broadcast_parameters", "check_same", "enabled", "init", "is_initialized",
    "rank", "shard", "shard_sizes", "size",
]
