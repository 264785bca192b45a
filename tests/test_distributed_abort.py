"""``handgrad.distributed.abort`` gets its message out before ``MPI_Abort``.

Under ``mpiexec`` a rank's stdout and stderr are pipes to the process manager, which
stops forwarding output once it handles the abort: a message it has not read by then is
lost (MPICH's ``mpiexec`` lost it in about one run in a hundred). So ``abort`` waits
until the pipes are empty. Here a job of two is faked in this process (a communicator
whose ``Abort`` records what the reader of stderr had received), and stderr is a pipe
read by a thread that starts late; ``python -m benchmarks.mpi_faults`` measures the real
thing under ``mpiexec``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time

import pytest

from handgrad.distributed import comm

LATE = 0.3  # seconds before the reader of the pipe starts reading


class Aborted(Exception):
    pass


class FakeWorld:
    """Rank 1 of 2; ``Abort`` records what ``received`` holds then and stops the call."""

    def __init__(self, received):
        self.received, self.seen = received, None

    def Get_size(self):
        return 2

    def Get_rank(self):
        return 1

    def Abort(self, code):
        self.seen = bytes(self.received)
        raise Aborted(code)


@contextlib.contextmanager
def stderr_read_late():
    """fd 2 is the write end of a pipe; yields the bytes a thread reads from it, the
    reading starting ``LATE`` seconds later. (Not a fixture: pytest's capture puts its
    own fd 2 back between a fixture's setup and the test.)"""
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 2)
    os.close(write)
    received = bytearray()

    def reader():
        time.sleep(LATE)
        while chunk := os.read(read, 4096):
            received.extend(chunk)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        os.dup2(saved, 2)  # the last write end closes: the reader sees the end
        os.close(saved)
        thread.join(timeout=10)
        os.close(read)


def test_abort_waits_until_the_message_is_read(monkeypatch):
    with stderr_read_late() as received, pytest.raises(Aborted):
        world = FakeWorld(received)
        monkeypatch.setitem(comm._state, "comm", world)
        comm.abort("ValueError: went wrong\nsecond line", code=3)
    assert world.seen == b"[rank 1] ValueError: went wrong\n[rank 1] second line\n"


def test_unread_bytes_of_a_pipe_and_a_socket():
    read, write = os.pipe()
    try:
        os.write(write, b"12345")
        assert comm.unread_bytes(write) == 5
        assert not comm.drain([write], seconds=0.05)  # nobody reads: it gives up
        os.read(read, 5)
        assert comm.unread_bytes(write) == 0 and comm.drain([write])
    finally:
        os.close(read)
        os.close(write)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.sendall(b"12345")
        assert comm.unread_bytes(ours.fileno()) > 0
        theirs.recv(5)
        assert comm.unread_bytes(ours.fileno()) == 0


def test_a_file_has_nothing_unread(tmp_path):
    with open(tmp_path / "log", "wb") as f:
        f.write(b"12345")
        f.flush()
        assert comm.unread_bytes(f.fileno()) == 0
    assert comm.unread_bytes(-1) == 0  # not a file descriptor
