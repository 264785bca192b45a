"""The benchmark harness: ``python -m benchmarks [--quick] [--rounds N] [--passes P]
[--out FILE]``.

Both libraries run in this process with 2 threads. Each case runs on both kernel paths
(compiled with numba, and pure NumPy: ``use_compiled``), timed round by round,
alternating handgrad and torch, and the medians after warm-up are compared (``--passes
P``: each row's medians over P whole runs, :mod:`benchmarks.passes`); the issue's
speed targets (:mod:`benchmarks.targets`) are then checked against those ratios and
printed (and written) as met or not met. ``--quick`` (CI's smoke test) runs every case
once on small inputs on both kernel paths and checks that handgrad and torch agree
numerically, each result within a bound derived from the dtype and the case
(:mod:`benchmarks.bounds`); it asserts no timing. Both modes print the 1-minute load
average at their start and end.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from handgrad.ops._engine import dispatch
from handgrad.testing import max_abs_error

from .bounds import bound, first_loss_bound, measured_bounds, op_bounds
from .cases import CASES, HandgradRunner, TorchRunner, flops, gemm_shape, make_inputs
from .e2e import EpochRunner
from .layout import channels_first, fastest
from .machine import load_average
from .passes import merge_passes
from .resnet import MODEL_CASES
from .targets import PATHS, check_targets, verdict

THREADS = 2
COMMAND = "python -m benchmarks"
DTYPES = (np.float32, np.float64)
ALL_CASES = [*CASES, *MODEL_CASES]


def group_of(case):
    """The case's target group: its own ``group``, else "conv", "pool" or "composite"."""
    if getattr(case, "group", None):
        return case.group
    if hasattr(case, "runners"):
        return "composite"
    return "conv" if case.is_conv else "pool"


def kernel_path(path):
    """Context: the compiled kernels on ("compiled") or off ("numpy")."""
    return dispatch.use_compiled(path == "compiled")


def paths():
    """The kernel paths this machine has: both with numba, else the NumPy one."""
    return PATHS if dispatch.available() else ("numpy",)


def runs(path_names, cases=ALL_CASES):
    """(path, case, dtype) of every case on every kernel path, inside its path's context;
    a case that cannot run here (``skip_reason()``) is printed as skipped once per path."""
    for path in path_names:
        for case in cases:
            reason = case.skip_reason() if hasattr(case, "skip_reason") else None
            if reason:
                print(f"{case.name:<38} {path:<8} skipped: {reason}", flush=True)
                continue
            for dtype in getattr(case, "dtypes", DTYPES):
                with kernel_path(path):
                    yield path, case, dtype


@dataclass
class Output:
    """One result compared: handgrad's and torch's values and the derived bound on
    their max abs difference (see :mod:`benchmarks.bounds`)."""

    name: str
    ours: np.ndarray
    theirs: np.ndarray
    bound: float

    @property
    def error(self):
        return max_abs_error(self.ours, self.theirs)


def compare_with_torch(case, dtype, quick=True):
    """[Output] for y and every gradient of a case, handgrad vs torch in ``dtype``."""
    if hasattr(case, "runners"):
        ours, theirs = case.runners(dtype, quick)
        bounds = measured_bounds(theirs)
        return [Output(name, np.asarray(a), np.asarray(t), bound(dtype, *terms_scale))
                for name, a, t, terms_scale in zip(case.outputs, ours.results(),
                                                   theirs.results(), bounds, strict=True)]
    x, w, b = make_inputs(case, dtype, quick)
    runner = HandgradRunner(case, x, w, b)
    y, grads = runner()
    theirs = TorchRunner(case, x, w, b, runner.dy).results()
    ours = [channels_first(y), channels_first(grads[0])]
    if case.is_conv:
        nd = x.ndim - 2
        ours += [grads[1].transpose(nd + 1, nd, *range(nd)), grads[2]]
    bounds = op_bounds(case, x, w, b, runner.dy)  # maxima: the same in either layout
    return [Output(name, a, t, bound(dtype, *terms_scale))
            for name, a, t, terms_scale in zip(("y", "dx", "dW", "db"), ours, theirs, bounds)]


def worst(outputs):
    """(the output with the largest error / bound, that ratio)."""
    ratios = [out.error / out.bound if out.bound > 0 else
              (0.0 if out.error == 0 else math.inf) for out in outputs]
    i = int(np.argmax(ratios))
    return outputs[i], ratios[i]


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def time_pair(first, second, rounds, warmup=2):
    """Medians (seconds) of two callables timed alternately, round by round."""
    for _ in range(warmup):
        first()
        second()
    a, b = [], []
    for _ in range(rounds):
        a.append(_timed(first))
        b.append(_timed(second))
    return statistics.median(a), statistics.median(b)


def matmul_ceiling(gemm, dtype, rounds):
    """Seconds for 3 bare (batched) matmuls of the conv's GEMM shape."""
    m, k, n, groups = gemm
    rng = np.random.default_rng(0)
    a = rng.standard_normal((groups, m, k)).astype(dtype)
    b = rng.standard_normal((groups, k, n)).astype(dtype)
    np.matmul(a, b)
    return 3 * statistics.median(_timed(lambda: np.matmul(a, b)) for _ in range(rounds))


def _timing_row(case, dtype, t_ours, t_theirs, layout):
    return {"case": case.name, "dtype": np.dtype(dtype).name, "group": group_of(case),
            "ours_ms": t_ours * 1e3, "torch_ms": t_theirs * 1e3, "ratio": t_ours / t_theirs,
            "torch_layout": layout}


def torch_runner(case, x, w, b, dy):
    """(torch's runner of a convolution or pooling case, its layout's name): NCHW or
    channels_last, whichever is faster in a few calls (:func:`.layout.fastest`)."""
    formats = [torch.contiguous_format] + ([torch.channels_last] if x.ndim == 4 else [])
    theirs, memory_format = fastest(
        lambda layout: TorchRunner(case, x, w, b, dy, layout), formats)
    return theirs, str(memory_format).split(".")[-1]


def bench_case(case, dtype, rounds):
    if hasattr(case, "runners"):
        ours, theirs = case.runners(dtype, quick=False)
        row = _timing_row(case, dtype, *time_pair(ours, theirs, rounds),
                          getattr(theirs, "layout", ""))
        row["peak_mb"], row["cache_mb"] = ours.memory()
        return row
    x, w, b = make_inputs(case, dtype, quick=False)
    ours = HandgradRunner(case, x, w, b)
    theirs, layout = torch_runner(case, x, w, b, ours.dy)
    t_ours, t_theirs = time_pair(ours, theirs, rounds)
    row = _timing_row(case, dtype, t_ours, t_theirs, layout)
    if case.is_conv:
        gemm = gemm_shape(case, x.shape, ours.dy.shape)
        ceiling = matmul_ceiling(gemm, dtype, rounds)
        row["matmul_pct"] = 100 * ceiling / t_ours
        row["gflops"] = flops(gemm) / t_ours / 1e9
    row["peak_mb"], row["cache_mb"] = ours.memory()
    return row


def bench_epochs(rounds, quick, path):
    from handgrad.data import load_digits, load_mnist1d

    rows = []
    for name, loader, batch in (("10a epoch MNIST-1D CNN", load_mnist1d, 64),
                                ("10b epoch digits CNN", load_digits, 32)):
        runner = EpochRunner(loader(), batch, max_examples=256 if quick else None)
        model, twin, optimizer = runner.fresh_models()
        loss_bound = first_loss_bound(runner, model)  # before the first step
        ours, theirs = runner.handgrad_epoch(model), runner.torch_epoch(twin, optimizer)
        first_loss_err = abs(ours[0] - theirs[0]) / abs(theirs[0])
        row = {"case": name, "dtype": "float32", "path": path, "group": "epoch",
               "first_loss_rel_err": first_loss_err, "first_losses": (ours[0], theirs[0]),
               "first_loss_bound": loss_bound}
        if not quick:
            t_ours, t_theirs = time_pair(partial(runner.handgrad_epoch, model),
                                         partial(runner.torch_epoch, twin, optimizer),
                                         max(3, rounds // 2), warmup=1)
            row.update(ours_ms=t_ours * 1e3, torch_ms=t_theirs * 1e3, ratio=t_ours / t_theirs)
        rows.append(row)
    return rows


def epoch_rows(rounds, quick, path_names):
    """The epoch cases' rows on every kernel path."""
    rows = []
    for path in path_names:
        with kernel_path(path):
            rows += bench_epochs(rounds, quick, path)
    return rows


def _epoch_outputs(row):
    ours, theirs = row["first_losses"]
    return [Output("loss[0]", np.asarray(ours), np.asarray(theirs), row["first_loss_bound"])]


def _report_line(name, path, dtype, outputs):
    """Print one case's worst output (largest error / bound); return (whether every
    output is within its bound, that ratio, name, path, dtype)."""
    out, ratio = worst(outputs)
    ok = all(o.error <= o.bound for o in outputs)
    print(f"{name:<38} {path:<8} {dtype:<8} {out.name:<7} {out.error:9.2e} {out.bound:9.2e} "
          f"{ratio:7.3f}  {'ok' if ok else 'MISMATCH'}", flush=True)
    return ok, ratio, name, path, dtype


def _load_line(when):
    load = load_average()
    line = f"load average (1 min) at the {when}: {'n/a' if load is None else f'{load:.2f}'}"
    print(line, flush=True)
    return load


def quick(args):
    """Every case once on small inputs on every kernel path, handgrad vs torch: per case,
    path and dtype, the output with the largest max|handgrad - torch| / derived bound
    (benchmarks.bounds)."""
    _load_line("start")
    path_names = paths()
    print(f"{'case':<38} {'path':<8} {'dtype':<8} {'worst':<7} {'max|err|':>9} {'bound':>9} "
          f"{'err/bnd':>7}")
    results = []
    for path, case, dtype in runs(path_names):
        outputs = compare_with_torch(case, dtype, quick=True)
        results.append(_report_line(case.name, path, np.dtype(dtype).name, outputs))
    for row in epoch_rows(0, True, path_names):
        results.append(_report_line(row["case"], row["path"], row["dtype"],
                                    _epoch_outputs(row)))
    failures = sum(not ok for ok, *_ in results)
    _, ratio, *where = max(results, key=lambda r: r[1])
    print(f"quick benchmark check: {len(results) - failures} passed, {failures} failed; "
          f"worst error / bound {ratio:.3f} ({', '.join(where)}); kernel paths: "
          f"{', '.join(path_names)}")
    _load_line("end")
    return 1 if failures else 0


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, NumPy "
            f"{np.__version__}, torch {torch.__version__}, {THREADS} threads each")


def _print_row(row):
    ratio = "" if row.get("ratio") is None else f"ratio {row['ratio']:.2f}"
    print(f"{row['case']:<38} {row['path']:<8} {row['dtype']:<8} {row['ours_ms']:8.2f} ms  "
          f"torch {row['torch_ms']:8.2f} ms  {ratio}", flush=True)


def word2vec_rows(path_names):
    """word2vec beside gensim on the compiled path (:func:`benchmarks.word2vec.harness_rows`)."""
    if "compiled" not in path_names:
        return []
    from .word2vec import harness_rows

    with kernel_path("compiled"):
        rows = harness_rows("compiled")
    for row in rows:
        ours, theirs = row["words_per_s"]
        print(f"{row['case']:<38} compiled words/s {ours:,.0f}, gensim {theirs:,.0f}: "
              f"{row['speed']:.2f}x", flush=True)
    return rows


def print_targets(results):
    print(f"{'target':<46} {'path':<8} {'limit':<7} {'measured':>8}  met")
    for r in results:
        measured = "" if r["measured"] is None else f"{r['measured']:.2f}"
        print(f"{r['target']:<46} {r['path']:<8} {r['limit']:<7} {measured:>8}  "
              f"{verdict(r)}  {r['worst']}", flush=True)


def _one_pass(path_names, rounds):
    """The rows of one pass: every case on every path, the epochs, word2vec."""
    rows = []
    for path, case, dtype in runs(path_names):
        row = {**bench_case(case, dtype, rounds), "path": path}
        rows.append(row)
        _print_row(row)
    for row in epoch_rows(rounds, False, path_names):
        rows.append(row)
        _print_row(row)
    return rows + word2vec_rows(path_names)


def full(args):
    from .report import write_report

    loads = [_load_line("start")]
    path_names = paths()
    passes = []
    for number in range(1, args.passes + 1):
        if args.passes > 1:
            print(f"pass {number} of {args.passes}", flush=True)
        passes.append(_one_pass(path_names, args.rounds))
    rows = merge_passes(passes)
    results = check_targets(rows)
    print_targets(results)
    loads.append(_load_line("end"))
    command = f"{COMMAND} --rounds {args.rounds}" + (
        f" --passes {args.passes}" if args.passes > 1 else "")
    write_report(args.out, rows, results, machine(), command, loads)
    print(f"wrote {args.out}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: numerics only")
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds per case (>= 7)")
    parser.add_argument("--passes", type=int, default=1,
                        help="whole runs in this process; each row takes the median over "
                             "them (benchmarks.passes)")
    parser.add_argument("--out", default="BENCHMARKS.md")
    args = parser.parse_args(argv)
    if args.passes < 1:
        parser.error(f"--passes must be 1 or more; received {args.passes}")
    torch.set_num_threads(THREADS)
    return quick(args) if args.quick else full(args)


if __name__ == "__main__":
    sys.exit(main())
