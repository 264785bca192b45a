"""Run by ``tests/test_distributed_mpi.py`` as ``mpiexec -n K python train_cases.py OUT``.

Trains every case of ``distributed_cases`` with ``fit(distributed=True)`` (buckets of at
most 256 bytes, so that several allreduces overlap backward) and writes, per rank, the
final state, the history and the distributed ``evaluate``/``predict`` of the training
data; then the explicit loop, a checkpoint resume (rank 0 saves, every rank loads) and
callbacks that record which ranks ran them. The test compares all of it with one process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import distributed_cases as cases
import handgrad.distributed as dist
from handgrad import io
from handgrad.training import Callback


class Recorder(Callback):
    """Writes ``rank`` into ``OUT/<name>.rank<r>`` at each epoch's end."""

    def __init__(self, out, name, rank_zero_only):
        self.path = Path(out) / f"{name}.rank{dist.rank()}"
        self.rank_zero_only = rank_zero_only

    def on_epoch_end(self, epoch, logs):
        with open(self.path, "a") as file:
            file.write(f"{epoch}\n")


def save(out, name, arrays, logs=None):
    np.savez(Path(out) / f"{name}.rank{dist.rank()}.npz", **arrays)
    if logs is not None:
        (Path(out) / f"{name}.rank{dist.rank()}.json").write_text(json.dumps(logs))


def resume(out):
    """bn_dropout for 2 epochs, a checkpoint written by rank 0, 2 more epochs; then every
    rank loads the checkpoint and trains the same 2 epochs again."""
    x, y = cases.data("bn_dropout")
    net, rng = cases.model("bn_dropout"), np.random.default_rng(3)
    net.fit(x, y, epochs=2, batch_size=10, rng=rng, verbose=0, distributed=True)
    path = Path(out) / "checkpoint.safetensors"
    if dist.rank() == 0:
        io.save_checkpoint(path, net, net.optimizer, epoch=2, rng=rng)
    dist.barrier()
    net.fit(x, y, epochs=4, initial_epoch=2, batch_size=10, rng=rng, verbose=0,
            distributed=True)
    checkpoint = io.load_checkpoint(path)
    again = checkpoint.model
    again.fit(x, y, epochs=4, initial_epoch=checkpoint.epoch, batch_size=10,
              rng=checkpoint.rng, verbose=0, distributed=True)
    save(out, "resume_straight", cases.state(net))
    save(out, "resume_loaded", cases.state(again))


def main(out):
    dist.init()
    dist.GradientReducer.BUCKET_BYTES = 256
    for case in cases.CASES:
        callbacks = ([Recorder(out, "everyone", False), Recorder(out, "rank_zero", True)]
                     if case == "cnn" else [])
        net, history = cases.train(case, distributed=True, verbose=int(case == "cnn"),
                                   callbacks=callbacks)
        x, y = cases.data(case)
        arrays = dict(cases.state(net), predict=net.predict(x, batch_size=4, distributed=True))
        logs = {"history": history.history,
                "evaluate": net.evaluate(x, y, batch_size=4, return_dict=True,
                                         distributed=True),
                "evaluate_two": net.evaluate(x[:2], y[:2], return_dict=True,
                                             distributed=True)}  # K > 2
        save(out, case, arrays, logs)
    net, logged = cases.explicit_loop(distributed=True)
    save(out, "explicit", cases.state(net), {"losses": logged})
    resume(out)


if __name__ == "__main__":
    main(sys.argv[1])
