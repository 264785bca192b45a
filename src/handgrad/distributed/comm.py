"""The MPI world of a data-parallel job: start it, ask where we are, sum and share.

mpi4py is imported by :func:`init` only, so the package works without it. Before
``init`` (or without MPI) a program is rank 0 of 1 and every collective is the identity.
After ``init`` an uncaught exception on any rank ends the whole job through
``MPI_Abort``: the other ranks would otherwise wait forever in their next collective.
"""

from __future__ import annotations

import os
import sys
import traceback

import numpy as np

from .._checks import choice, describe

INSTALL_HINT = ('data-parallel training needs mpi4py and an MPI library: pip install -e '
                '".[mpi]" (installs mpi4py and the mpich wheels, which provide mpiexec)')
OPS = ("sum", "max", "min")

_state = {"mpi": None, "comm": None}


class RankMismatchError(ValueError):
    """The processes of a job were given different data or settings (raised by
    :func:`check_same` on every process alike)."""


def init():
    """Start MPI through mpi4py (once; later calls do nothing) and make an uncaught
    exception on any rank end the job (see :func:`abort`). Raises ImportError with the
    install command when mpi4py is missing."""
    if _state["comm"] is not None:
        return
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise ImportError(f"handgrad.distributed.init: {INSTALL_HINT} ({error})") from None
    _state["mpi"], _state["comm"] = MPI, MPI.COMM_WORLD
    if MPI.COMM_WORLD.Get_size() > 1:
        previous = sys.excepthook

        def abort_on_uncaught(kind, value, trace):
            if previous is sys.__excepthook__:
                abort("".join(traceback.format_exception(kind, value, trace)))
            previous(kind, value, trace)
            abort(None)

        sys.excepthook = abort_on_uncaught


def is_initialized() -> bool:
    """Whether :func:`init` has run."""
    return _state["comm"] is not None


def enabled() -> bool:
    """Whether this process is one of several: initialized and :func:`size` > 1."""
    return size() > 1


def rank() -> int:
    """This process's index in the job, 0 before :func:`init`."""
    comm = _state["comm"]
    return 0 if comm is None else comm.Get_rank()


def size() -> int:
    """The number of processes in the job, 1 before :func:`init`."""
    comm = _state["comm"]
    return 1 if comm is None else comm.Get_size()


def mpi():
    """``(MPI module, COMM_WORLD)``; RuntimeError before :func:`init`."""
    if _state["comm"] is None:
        raise RuntimeError("handgrad.distributed: call handgrad.distributed.init() first")
    return _state["mpi"], _state["comm"]


def barrier():
    """Wait until every rank gets here."""
    if enabled():
        mpi()[1].Barrier()


def _mpi_op(name):
    return getattr(mpi()[0], name.upper())


def allreduce(value, op="sum"):
    """``op`` ("sum", "max" or "min") of ``value`` over the ranks: a new array of the
    same shape and dtype for an array, a float for a Python or NumPy number."""
    op = choice("allreduce", "op", op, OPS)
    scalar = np.ndim(value) == 0 and not isinstance(value, np.ndarray)
    if not (scalar or isinstance(value, np.ndarray)) or \
            np.asarray(value).dtype.kind not in "biuf":
        raise TypeError(f"allreduce: 'value' must be a number or a numeric NumPy array; "
                        f"received {describe(value)}")
    array = np.array(value, dtype=np.float64 if scalar else None)  # a contiguous copy
    if enabled():
        mpi()[1].Allreduce(mpi()[0].IN_PLACE, array, op=_mpi_op(op))
    return float(array) if scalar else array


def broadcast(obj, root=0):
    """Rank ``root``'s ``obj`` (any picklable object) on every rank."""
    return mpi()[1].bcast(obj, root=root) if enabled() else obj


def allgather(obj) -> list:
    """Every rank's ``obj`` (picklable), in rank order."""
    return mpi()[1].allgather(obj) if enabled() else [obj]


def check_same(op, settings: dict):
    """Raise :class:`RankMismatchError` on every process, naming each one's values, when
    ``settings`` (picklable values: data sizes, batch size, ...) differ between them."""
    everyone = allgather(settings)
    differ = [key for key in settings if any(other.get(key) != settings[key]
                                             for other in everyone)]
    if differ:
        values = {key: [other.get(key) for other in everyone] for key in differ}
        raise RankMismatchError(f"{op}: every process must be given the same data and "
                                f"settings; received, by rank: {values}")


def abort(message=None, code=1):
    """End every process of the job with exit status ``code``, after printing
    ``message`` (or the exception being handled, with its traceback) to stderr, prefixed
    with this rank. With one process it raises SystemExit instead."""
    if message is None and sys.exc_info()[0] is not None:
        message = traceback.format_exc()
    if message:
        lines = str(message).rstrip("\n").splitlines()
        print("\n".join(f"[rank {rank()}] {line}" for line in lines), file=sys.stderr,
              flush=True)
    sys.stdout.flush()
    if not enabled():
        raise SystemExit(code)
    mpi()[1].Abort(code)
    os._exit(code)  # MPI_Abort may return before the process manager ends this process


def run_or_abort(function, *args, passthrough=(), **kwargs):
    """``function(*args, **kwargs)``; an exception other than ``passthrough`` (errors that
    every rank raises at the same point) ends the whole job (:func:`abort`) when there are
    several ranks, since the others would wait forever in their next collective."""
    try:
        return function(*args, **kwargs)
    except passthrough:
        raise
    except BaseException:
        if not enabled():
            raise
        abort(None)
