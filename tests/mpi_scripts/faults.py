"""Run by ``tests/test_distributed_mpi.py`` as ``mpiexec -n 2 python faults.py MODE``; every
mode must end the whole job with a non-zero exit and the message, never hang:

- ``fit``: rank 1 raises from a callback in the middle of ``fit(distributed=True)``
  while rank 0 goes on to the next step's collectives;
- ``uncaught``: rank 1 raises at top level while rank 0 waits in a barrier;
- ``mismatch``: rank 1 is given one example fewer than rank 0.

``MESSAGES`` holds what each mode must print to stderr; ``tests/test_distributed_mpi.py``
runs every mode once and ``python -m benchmarks.mpi_faults`` many times (the message
must come out every time).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import distributed_cases as cases
import handgrad.distributed as dist
from handgrad.training import Callback

MESSAGES = {
    "fit": "RuntimeError: rank 1 fails on purpose at step 2",
    "uncaught": "ValueError: uncaught error on rank 1",
    "mismatch": "every process must be given the same data and settings; received, by "
                "rank: {'examples': [47, 46]}",
}


class FailOnRankOne(Callback):
    def on_train_batch_end(self, step, logs):
        if dist.rank() == 1 and step == 1:
            raise RuntimeError("rank 1 fails on purpose at step 2")


def main(mode):
    dist.init()
    x, y = cases.data("cnn")
    net = cases.model("cnn")
    if mode == "fit":
        net.fit(x, y, epochs=2, batch_size=10, rng=0, verbose=0, callbacks=[FailOnRankOne()],
                distributed=True)
    elif mode == "uncaught":
        if dist.rank() == 1:
            raise ValueError("uncaught error on rank 1")
        dist.barrier()
    elif mode == "mismatch":
        n = len(x) - dist.rank()
        net.fit(x[:n], y[:n], epochs=1, batch_size=10, rng=0, verbose=0, distributed=True)
    print(f"rank {dist.rank()} finished", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
