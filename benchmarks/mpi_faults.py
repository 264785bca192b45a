"""Does a failing rank's message reach the user every time? Every mode of
``tests/mpi_scripts/faults.py`` (a rank that raises inside ``fit``, at top level, or is
given other data) run many times under ``mpiexec -n 2``:

    python -m benchmarks.mpi_faults                          # 200 runs of each mode
    python -m benchmarks.mpi_faults --runs 20 --modes uncaught

A run passes when ``mpiexec`` exits non-zero within ``--timeout``, its stderr holds the
mode's message (``faults.MESSAGES``) and no rank printed "finished". The launches use
the tests' environment (one BLAS thread a process, ``HYDRA_LAUNCHER=fork``). A message
lost once in a hundred runs fails a test suite at random, so this check runs hundreds of
launches (tens of minutes on two cores): it is not part of ``python -m benchmarks
--quick`` nor of the test suite. Exit status 1 when any run failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .distributed import THREAD_VARIABLES, _mpiexec

SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "mpi_scripts" / "faults.py"


def _messages():
    spec = importlib.util.spec_from_file_location("faults", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MESSAGES


def launch(mode, message, timeout):
    """``(failure or None, seconds)`` of one ``mpiexec -n 2 python faults.py mode``."""
    env = dict(os.environ, **dict.fromkeys(THREAD_VARIABLES, "1"), HYDRA_LAUNCHER="fork")
    command = [_mpiexec(), "-n", "2", sys.executable, str(SCRIPT), mode]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hung", time.perf_counter() - start
    seconds = time.perf_counter() - start
    if done.returncode == 0:
        return "exit status 0", seconds
    if "finished" in done.stdout:
        return "a rank went on", seconds
    if message not in done.stderr:
        return f"message lost (stderr: {done.stderr[-300:]!r})", seconds
    return None, seconds


def main(argv=None):
    messages = _messages()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mpi_faults",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="launches per mode")
    parser.add_argument("--modes", nargs="+", choices=sorted(messages),
                        default=sorted(messages))
    parser.add_argument("--timeout", type=float, default=120, help="seconds per launch")
    args = parser.parse_args(argv)
    print(f"{'mode':<10} {'runs':>5} {'message shown':>14} {'lost':>5} {'other':>6} "
          f"{'median s':>9}")
    failed = False
    for mode in args.modes:
        outcomes, times = [], []
        for _ in range(args.runs):
            failure, seconds = launch(mode, messages[mode], args.timeout)
            outcomes.append(failure)
            times.append(seconds)
        lost = sum(1 for f in outcomes if f and f.startswith("message lost"))
        other = sum(1 for f in outcomes if f) - lost
        print(f"{mode:<10} {args.runs:>5} {outcomes.count(None):>14} {lost:>5} {other:>6} "
              f"{statistics.median(times):>9.2f}", flush=True)
        for failure in dict.fromkeys(f for f in outcomes if f):
            print(f"    {failure}", flush=True)
        failed = failed or any(outcomes)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
