"""``python -m handgrad train --distributed`` inside an MPI job (``mpiexec -n K``).

Every process runs the whole command on the whole data set; ``fit(distributed=True)``
gives each its share of every global batch (:mod:`handgrad.distributed`). Rank 0 alone
decides and creates the run folder (the others are sent its name), prints and writes
files. A bad option, file or dataset met on any process stops every process at the same
point: the lowest rank that met one prints its one-line error and every process exits
with its status. An error that one process alone meets while training ends the whole job
through ``MPI_Abort`` (see :func:`handgrad.distributed.init`), never a hang.

Without ``--distributed`` these helpers only call the step: a one-process run.
"""

from __future__ import annotations

from typing import NamedTuple

from .. import distributed as dist
from .args import UsageError, reason


class World(NamedTuple):
    """This process's place in the job: rank 0 of 1 for a one-process run."""

    rank: int
    size: int


def start(args) -> World:
    """Start MPI for ``--distributed`` (a UsageError that names the install command when
    mpi4py is missing); rank 0 of 1 without it."""
    if not args.distributed:
        return World(0, 1)
    try:
        dist.init()
    except ImportError as error:
        raise UsageError(f"--distributed: {reason(error)}") from None
    return World(dist.rank(), dist.size())


def everywhere(step, *args):
    """``step(*args)`` on every process. A :class:`UsageError` on any process ends the
    command on all of them together: the lowest failing rank raises its error (printed
    by ``main``; "on rank R: " before it when R > 0), the others exit with its status
    without a word. Collective: every process must call it at the same point."""
    try:
        result, failure = step(*args), None
    except UsageError as error:
        result, failure = None, error
    report = None if failure is None else (str(failure), failure.status)
    failures = [(rank, item) for rank, item in enumerate(dist.allgather(report)) if item]
    if not failures:
        return result
    first, (message, status) = failures[0]
    if first != dist.rank():
        raise SystemExit(status)  # rank `first` reports it
    if first > 0:
        raise UsageError(f"on rank {first}: {message}", status)
    raise failure


def from_rank_zero(step, *args):
    """``step(*args)`` run on rank 0 only (e.g. creating the run folder); its result, or
    its UsageError (see :func:`everywhere`), on every process."""
    result = everywhere(lambda: step(*args) if dist.rank() == 0 else None)
    return dist.broadcast(result)
