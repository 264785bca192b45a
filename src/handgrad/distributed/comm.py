"""The MPI world of a data-parallel job: start it, ask where we are, sum and share.

mpi4py is imported by :func:`init` only, so the package works without it. Before
``init`` (or without MPI) a program is rank 0 of 1 and every collective is the identity.
After ``init`` an uncaught exception on any rank ends the whole job through
``MPI_Abort``: the other ranks would otherwise wait forever in their next collective.
Its message is written straight to file descriptor 2 and :func:`abort` waits (a few
seconds at most) until the process manager has read it: MPICH's proxy, finding a rank's
stderr and its abort request ready together, forwards the abort first, and ``mpiexec``
exits on it, dropping the output forwarded after it.
"""

from __future__ import annotations

import array
import os
import stat
import sys
import time
import traceback

import numpy as np

from .._checks import choice, describe

INSTALL_HINT = ('data-parallel training needs mpi4py and an MPI library: pip install -e '
                '".[mpi]" (installs mpi4py and the mpich wheels, which provide mpiexec)')
OPS = ("sum", "max", "min")
DRAIN_SECONDS = 5.0  # the longest abort waits for the process manager to read its output

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
    with this rank. With one process it raises SystemExit instead.

    With several, the Python streams are flushed, the message is written to file
    descriptor 2 unbuffered, and :func:`drain` waits until the process manager has read
    stdout and stderr before ``MPI_Abort``: output it reads after the abort request is
    lost (see the module docstring)."""
    if message is None and sys.exc_info()[0] is not None:
        message = traceback.format_exc()
    lines = str(message).rstrip("\n").splitlines() if message else []
    text = "".join(f"[rank {rank()}] {line}\n" for line in lines)
    if not enabled():
        print(text, end="", file=sys.stderr, flush=True)
        raise SystemExit(code)
    _flush_streams()
    _write_fd(2, text)
    drain((1, 2))
    mpi()[1].Abort(code)
    os._exit(code)  # MPI_Abort may return before the process manager ends this process


def _flush_streams():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # None, closed or a broken pipe
            pass


def _write_fd(fd, text):
    data = text.encode(errors="backslashreplace")
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # closed or a broken pipe: nothing more can be said
        pass


def unread_bytes(fd) -> int:
    """How many bytes written to ``fd`` its reader has not taken yet: the contents of a
    pipe (``FIONREAD``) or the unsent queue of a socket (``TIOCOUTQ``); 0 for anything
    else (a file, a terminal) or where the platform cannot tell."""
    try:
        import fcntl
        import termios

        mode = os.fstat(fd).st_mode
        request = (termios.FIONREAD if stat.S_ISFIFO(mode) else
                   termios.TIOCOUTQ if stat.S_ISSOCK(mode) else None)
        if request is None:
            return 0
        count = array.array("i", [0])
        fcntl.ioctl(fd, request, count)
    except (ImportError, AttributeError, OSError):
        return 0
    return count[0]


def drain(fds=(1, 2), seconds=DRAIN_SECONDS) -> bool:
    """Wait until the readers of the file descriptors ``fds`` have taken everything
    written to them (:func:`unread_bytes` is 0), at most ``seconds``; whether they did.
    Under ``mpiexec`` a rank's stdout and stderr are pipes to the process manager."""
    deadline = time.monotonic() + seconds
    while any(unread_bytes(fd) for fd in fds):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


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
