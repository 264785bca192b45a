"""Data-parallel training over MPI: the MNIST-1D CNN at 1 and 2 processes.

    python -m benchmarks.distributed                      # 1 and 2 processes, batch 64
    python -m benchmarks.distributed --processes 1 2 3 --epochs 6 --batch-size 128

For each K it launches ``mpiexec -n K python -m benchmarks.distributed --worker``, one
BLAS and one numba thread a process (``OMP_NUM_THREADS=1``, ``NUMBA_NUM_THREADS=1``,
threadpoolctl where installed). Every process trains ``zoo.build("cnn", mnist1d)`` with
``fit(distributed=True)`` (Adam, no validation, global batch ``--batch-size``); the
first epoch warms up (compiled kernels, caches) and the median of the others is reported.

Columns: *epoch s* (median), *examples/s*, *step ms* (epoch time / steps), *wait ms*
(per step, the time ``GradientReducer.reduce`` waits for the gradient buckets after
backward: the allreduce that backward did not hide, plus waiting for a slower rank),
*logs ms* (per step, the small allreduce of the step's loss and accuracy), *comm %*
((wait + logs) / step, the mean over the ranks), *bare ms* (one ``mpi4py``
``Allreduce`` of as many bytes as the gradients, the mean of ``--reps`` calls),
*speed-up* (examples/s over the first process count's, normally 1) and *efficiency*
(speed-up per added process: speed-up x first count / K). ``--rounds`` interleaves
several launches per K and pools their epochs, which helps on a busy machine.
The timing of ``reduce`` and ``mean`` is read from a subclass of
:class:`handgrad.distributed.GradientReducer` that ``fit`` is given in this benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

from .machine import load_average

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS")
MARK = "RESULT "  # the worker's result line on rank 0's stdout


# ------------------------------------------------------------------ one MPI process


def _timed_reducer_class(dist, bucket_bytes):
    """GradientReducer that also counts steps and times :meth:`mean` (``wait_seconds``
    is the reducer's own), with buckets of ``bucket_bytes``."""

    class TimedReducer(dist.GradientReducer):
        made: ClassVar[list] = []

        def __init__(self, model, bucket_bytes=bucket_bytes):
            super().__init__(model, bucket_bytes=bucket_bytes)
            self.mean_seconds, self.steps = 0.0, 0
            TimedReducer.made.append(self)

        def mean(self, value):
            start = time.perf_counter()
            try:
                return super().mean(value)
            finally:
                self.mean_seconds += time.perf_counter() - start

        def reduce(self):
            self.steps += 1
            super().reduce()

    return TimedReducer


def _epoch_timer(reducers):
    """A Callback recording, per epoch, its seconds and the reducer's totals."""
    from handgrad.training import Callback

    class EpochTimer(Callback):
        def __init__(self):
            self.epochs = []

        def _totals(self):
            reducer = reducers[-1]
            return time.perf_counter(), reducer.wait_seconds, reducer.mean_seconds, \
                reducer.steps

        def on_epoch_begin(self, epoch, logs=None):
            self._start = self._totals()

        def on_epoch_end(self, epoch, logs):
            end = self._totals()
            self.epochs.append([b - a for a, b in zip(self._start, end)])

    return EpochTimer()


def _bare_allreduce(nbytes, dtype, reps):
    """Mean seconds of one blocking ``Allreduce`` of ``nbytes`` (after 10 warm-up calls)."""
    import numpy as np
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    send = np.ones(max(nbytes // np.dtype(dtype).itemsize, 1), dtype=dtype)
    receive = np.empty_like(send)
    for _ in range(10):
        world.Allreduce(send, receive)
    world.Barrier()
    start = time.perf_counter()
    for _ in range(reps):
        world.Allreduce(send, receive)
    return (time.perf_counter() - start) / reps


def worker(args):
    """Train and time on this process; rank 0 prints the job's figures as one JSON line."""
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(limits=1)
    except ImportError:
        pass
    import numpy as np

    import handgrad.distributed as dist
    from handgrad.data import load_mnist1d
    from handgrad.zoo import networks as zoo

    dist.init()
    bucket_bytes = dist.GradientReducer.BUCKET_BYTES if args.bucket_kib is None else \
        args.bucket_kib * 1024
    reducer_class = _timed_reducer_class(dist, bucket_bytes)
    dist.GradientReducer = reducer_class  # fit(distributed=True) makes its reducer here
    data = load_mnist1d()
    x = data.x_train.astype(args.dtype)
    model = zoo.build("cnn", data, seed=0, dtype=args.dtype)
    model.compile("adam", "cross_entropy", metrics=("accuracy",))
    timer = _epoch_timer(reducer_class.made)
    model.fit(x, data.y_train, epochs=args.epochs, batch_size=args.batch_size, rng=0,
              verbose=0, callbacks=[timer], distributed=True)
    reducer = reducer_class.made[-1]
    gradient_bytes = sum(a.nbytes for a in model.named_parameters().values())
    bare = _bare_allreduce(gradient_bytes, args.dtype, args.reps) if dist.enabled() else 0.0
    logs_bare = _bare_allreduce(16, np.float64, args.reps) if dist.enabled() else 0.0
    timed = timer.epochs[1:] or timer.epochs  # the first epoch warms up
    per_rank = dist.allgather({
        "epoch_seconds": [t[0] for t in timed],
        "wait_seconds": [t[1] for t in timed], "logs_seconds": [t[2] for t in timed],
        "steps": [t[3] for t in timed]})
    if dist.rank() != 0:
        return
    from mpi4py import MPI

    print(MARK + json.dumps({
        "processes": dist.size(), "examples": len(x), "batch_size": args.batch_size,
        "dtype": args.dtype, "parameters": int(sum(a.size for a in
                                                   model.named_parameters().values())),
        "gradient_bytes": gradient_bytes, "buckets": len(reducer.buckets),
        "bucket_kib": bucket_bytes / 1024,
        "bare_allreduce_seconds": bare, "bare_logs_allreduce_seconds": logs_bare,
        "per_rank": per_rank, "warmup_epoch_seconds": timer.epochs[0][0],
        "mpi": MPI.Get_library_version().splitlines()[0].strip(),
    }), flush=True)


# ------------------------------------------------------------------- the launcher


def _mpiexec():
    local = Path(sys.executable).parent / "mpiexec"
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if found is None:
        sys.exit('benchmarks.distributed: mpiexec not found; pip install -e ".[mpi]" '
                 "installs mpi4py and MPICH's mpiexec")
    return found


def launch(processes, args):
    """The worker's figures for ``processes`` ranks, with the load average around it."""
    env = dict(os.environ, **dict.fromkeys(THREAD_VARIABLES, "1"))
    env.setdefault("HYDRA_LAUNCHER", "fork")  # processes on this machine, no ssh
    command = [_mpiexec(), "-n", str(processes), *shlex.split(args.mpiexec_args),
               sys.executable, "-m", "benchmarks.distributed", "--worker",
               "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
               "--dtype", args.dtype, "--reps", str(args.reps),
               *(["--bucket-kib", str(args.bucket_kib)] if args.bucket_kib else [])]
    before = load_average()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        sys.exit(f"benchmarks.distributed: {shlex.join(command)} ran past {args.timeout} s")
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or len(lines) != 1:
        sys.exit(f"benchmarks.distributed: {shlex.join(command)} failed "
                 f"({done.returncode}):\n{done.stdout}\n{done.stderr}")
    result = json.loads(lines[0][len(MARK):])
    result["load_average"] = [before, load_average()]
    return result


def merged(results):
    """The launches of one process count as one: their timed epochs pooled per rank,
    the median of their bare allreduce times, the load average before the first and
    after the last."""
    first = dict(results[0])
    first["per_rank"] = [{key: [value for result in results
                                for value in result["per_rank"][rank][key]]
                          for key in first["per_rank"][rank]}
                         for rank in range(len(first["per_rank"]))]
    for key in ("bare_allreduce_seconds", "bare_logs_allreduce_seconds"):
        first[key] = statistics.median(result[key] for result in results)
    first["load_average"] = [results[0]["load_average"][0], results[-1]["load_average"][1]]
    first["launches"] = len(results)
    return first


def summarize(result, one):
    """The table's figures of one launch; ``one``: the one-process launch's, or None."""
    ranks = result["per_rank"]
    epoch = statistics.median(ranks[0]["epoch_seconds"])
    steps = ranks[0]["steps"][0]

    def per_step_ms(key):  # the mean over ranks of each rank's median epoch, per step
        return 1e3 * statistics.mean(statistics.median(r[key]) for r in ranks) / steps

    step_ms, wait_ms, logs_ms = 1e3 * epoch / steps, per_step_ms("wait_seconds"), \
        per_step_ms("logs_seconds")
    rate = result["examples"] / epoch
    speedup = rate / one["rate"] if one else 1.0
    return {"processes": result["processes"], "epoch": epoch, "rate": rate,
            "step_ms": step_ms, "wait_ms": wait_ms, "logs_ms": logs_ms,
            "comm_pct": 100 * (wait_ms + logs_ms) / step_ms,
            "bare_ms": 1e3 * result["bare_allreduce_seconds"],
            "bare_logs_ms": 1e3 * result["bare_logs_allreduce_seconds"],
            "speedup": speedup,
            "efficiency": speedup * (one["processes"] if one else 1) / result["processes"],
            "load": result["load_average"], "epochs_timed": len(ranks[0]["epoch_seconds"])}


def table(rows, first, last):
    head = ("| processes | epoch s | examples/s | step ms | wait ms | logs ms | comm % "
            "| bare ms | speed-up | efficiency | load before/after |")
    lines = [head, "|" + "---:|" * 10 + "---|"]
    for r in rows:
        lines.append(
            f"| {r['processes']} | {r['epoch']:.2f} | {r['rate']:.0f} | {r['step_ms']:.1f} | "
            f"{r['wait_ms']:.2f} | {r['logs_ms']:.2f} | {r['comm_pct']:.1f} | "
            f"{r['bare_ms']:.3f} | {r['speedup']:.2f}x | {r['efficiency']:.0%} | "
            f"{r['load'][0]} / {r['load'][1]} |")
    kb = first["gradient_bytes"] / 1024
    machine = platform.processor() or platform.machine()
    lines += ["", f"MNIST-1D CNN (`zoo.build(\"cnn\", mnist1d)`, {first['parameters']:,} "
              f"parameters, {kb:.0f} KiB of {first['dtype']} gradients in "
              f"{last['buckets']} bucket(s), closed at {last['bucket_kib']:g} KiB), "
              f"{first['examples']} training examples per epoch, global batch "
              f"{first['batch_size']}, Adam; median of {rows[0]['epochs_timed']} epochs "
              f"({first['launches']} launch(es), each after one warm-up epoch); "
              f"{first['mpi']}; {os.cpu_count()} CPUs ({machine})."]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.distributed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2],
                        help="process counts to launch; the first is the baseline")
    parser.add_argument("--epochs", type=int, default=4,
                        help="epochs per launch, the first a warm-up")
    parser.add_argument("--batch-size", type=int, default=64, help="the global batch")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--bucket-kib", type=int,
                        help="gradient bucket size of the reducer, KiB (default: "
                        "GradientReducer.BUCKET_BYTES, what fit uses)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="launches per process count, interleaved (1, 2, 1, 2, ...); "
                        "their timed epochs are pooled")
    parser.add_argument("--reps", type=int, default=200,
                        help="calls of the bare Allreduce that are timed")
    parser.add_argument("--mpiexec-args", default="",
                        help="extra mpiexec options, e.g. '-bind-to core'")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per launch")
    parser.add_argument("--json", metavar="PATH", help="also write the raw figures here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.epochs < 2 or min(args.batch_size, args.reps, args.rounds, args.bucket_kib or 1,
                              *args.processes) < 1:
        parser.error("--epochs must be >= 2; --batch-size, --reps, --rounds, --bucket-kib "
                     "and --processes >= 1")
    if args.worker:
        return worker(args)
    launches = {processes: [] for processes in args.processes}
    for round_ in range(args.rounds):
        for processes in args.processes:
            print(f"round {round_ + 1}: mpiexec -n {processes} ... (load average "
                  f"{load_average()})", flush=True)
            launches[processes].append(launch(processes, args))
    results, rows = [merged(launches[processes]) for processes in args.processes], []
    for result in results:
        rows.append(summarize(result, rows[0] if rows else None))
    print(table(rows, results[0], results[-1]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
