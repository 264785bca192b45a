"""The device check: ``python -m benchmarks.gpu --out DIR [--budget-s 420] [--dry-run]``.

On a machine with CuPy and a GPU it runs, in this order and within ``--budget-s``:

1. the op table (every sample of every declared op, the test suite's ``tests/optable.py``)
   in float32 and float64, CuPy against NumPy, each output and gradient within the
   suite's derived bound (``optable.assert_results_close``);
2. the layer table (``handgrad.testing.LAYER_CASES``): forward, input and parameter
   gradients of the same layer (same seed) on both devices;
3. the CLI's default MNIST-1D network and recipe on the GPU and on the CPU (same epochs,
   same seed): test accuracy and seconds (:mod:`benchmarks.gpu_timing`);
4. a ResNet-18 (torchvision's, else the same network built here) converted with
   ``convert_torch``: one float32 training step, handgrad on CuPy against torch CUDA;
5. the convolution and pooling cases of ``benchmarks.cases``, forward+backward, handgrad
   on CuPy against torch CUDA.

Every item runs guarded: an error is recorded with the head of its traceback and the
run goes on; a section that runs out of its share of the budget records what it skipped.
Results: ``DIR/gpu.json`` and ``DIR/gpu.md``, rewritten after every section.
``--dry-run`` runs every code path with NumPy standing in for the device (and torch on
the CPU), on small sizes, to check the script before a device is lent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from functools import partial
from pathlib import Path

import numpy as np

from handgrad import ops
from handgrad._device import cuda_module, to_device, to_host

from .machine import load_average

TESTS = Path(__file__).resolve().parent.parent / "tests"
#: the sections in running order and their shares of the budget (the issue's criteria first)
SHARES = {"ops": 0.42, "mnist1d": 0.25, "conv": 0.12, "resnet18": 0.13, "layers": 0.08}


class Device:
    """The device under test: CuPy on "cuda", or NumPy standing in (``dry``)."""

    def __init__(self, dry: bool):
        self.dry = dry
        self.name = "cpu" if dry else "cuda"
        self.xp = np if dry else cuda_module("benchmarks.gpu")
        self.torch = "cpu" if dry else "cuda"
        if dry:
            self.label = "NumPy standing in for the device (dry run)"
        else:
            props = self.xp.cuda.runtime.getDeviceProperties(0)
            self.label = f"{props['name'].decode()} (CuPy {self.xp.__version__})"

    def put(self, value):
        return to_device(value, self.name)

    def sync(self):
        if not self.dry:
            self.xp.cuda.Device().synchronize()
            import torch
            if torch.cuda.is_available():
                torch.cuda.synchronize()


class Report:
    """Rows per section, written to JSON and markdown after each section."""

    def __init__(self, out: Path, budget: float, device: Device):
        self.out, self.budget, self.start = out, budget, time.perf_counter()
        self.device = device
        self.sections: dict[str, list[dict]] = {}
        self.notes: dict[str, list[str]] = {}
        out.mkdir(parents=True, exist_ok=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def deadline(self, section: str) -> float:
        """The elapsed time by which ``section`` should end: the shares so far, so that
        time a section leaves unused goes to the next ones."""
        names = list(SHARES)
        return self.budget * sum(SHARES[n] for n in names[:names.index(section) + 1])

    def row(self, section: str, **row):
        self.sections.setdefault(section, []).append(row)
        status = row.get("status", "")
        if status not in ("pass", "ok"):
            print(f"  [{section}] {row.get('name', '')} {row.get('dtype', '')}: {status} "
                  f"{row.get('error', '')[:160]}", flush=True)

    def note(self, section: str, text: str):
        self.notes.setdefault(section, []).append(text)
        print(f"  [{section}] {text}", flush=True)

    def guarded(self, section: str, fn, **row):
        """``fn()`` (returning a dict of extra fields), recorded as a row; an exception
        becomes a row with its traceback's head."""
        try:
            extra = fn() or {}
            self.row(section, **row, **{"status": "pass", **extra})
        except Exception as error:  # a failed item is recorded; the run goes on
            head = traceback.format_exc().strip().splitlines()
            kind = "fail" if isinstance(error, AssertionError) else "error"
            self.row(section, **row, status=kind, error=f"{type(error).__name__}: {error}",
                     traceback=head[-12:])

    def write(self):
        meta = {"device": self.device.label, "dry_run": self.device.dry,
                "budget_s": self.budget, "elapsed_s": round(self.elapsed(), 1),
                "python": platform.python_version(), "numpy": np.__version__,
                "loadavg": load_average(), "command": " ".join(sys.argv)}
        (self.out / "gpu.json").write_text(json.dumps(
            {"meta": meta, "sections": self.sections, "notes": self.notes}, indent=1,
            default=str))
        (self.out / "gpu.md").write_text(markdown(meta, self.sections, self.notes))



def markdown(meta, sections, notes) -> str:
    lines = ["# handgrad device check", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items()]
    for name, rows in sections.items():
        counts = {}
        for r in rows:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        lines += ["", f"## {name}", "", "counts: " + ", ".join(
            f"{k} {v}" for k, v in sorted(counts.items())), ""]
        lines += [f"- {n}" for n in notes.get(name, [])]
        keys = [k for k in dict.fromkeys(k for r in rows for k in r)
                if k not in ("traceback",)]
        shown = rows if name not in ("ops", "layers") else \
            [r for r in rows if r["status"] != "pass"]
        if shown:
            lines += ["", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
            lines += ["| " + " | ".join(str(r.get(k, "")).replace("|", "/")[:200]
                                        for k in keys) + " |" for r in shown]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------- 1. the op table
def op_cases():
    """Every declared sample of every op (activations included), as ``optable.OpCase``."""
    sys.path.insert(0, str(TESTS))
    from handgrad.ops.declare import Sample

    import optable
    cases = [optable.OpCase.of(decl, sample) for decl in ops.DECLARED.values()
             for sample in decl.samples if isinstance(sample, Sample)]
    return optable, cases


def check_op(optable, device, case, dtype):
    arrays = case.inputs(dtype)
    y, dy, grads = optable.run(ops, case, arrays)
    yd, _, gd = optable.run(ops, case, device.put(arrays), dy=device.put(dy))
    if not device.dry and type(yd).__module__.split(".")[0] != "cupy":
        raise AssertionError(f"the output is a {type(yd).__name__}, not a CuPy array")
    ours = (to_host(yd), tuple(to_host(g) for g in gd))
    optable.assert_results_close(case, arrays, dy, ours, (y, grads), dtype, case.id)


def run_ops(report, device):
    optable, cases = op_cases()
    report.note("ops", f"{len(cases)} op samples x float32, float64")
    for i, case in enumerate(cases):
        if report.elapsed() > report.deadline("ops"):
            report.note("ops", f"budget: {len(cases) - i} samples not run")
            break
        for dtype in (np.float32, np.float64):
            report.guarded("ops", partial(check_op, optable, device, case, dtype),
                           name=case.id, dtype=np.dtype(dtype).name)
    report.write()


# ---------------------------------------------------------------- 2. the layer table
def _layer_io(name, draw, dtype, device):
    """(layer, x) drawn from seed 0 for ``device`` ("cpu" or the device's name)."""
    from handgrad.testing import INTEGER_INPUT_CASES
    layer, shape = draw(np.random.default_rng(0))
    if getattr(layer, "seed", 0) is None:  # the same weights for both devices
        layer.seed = 1234
    rng = np.random.default_rng(1)
    if name in INTEGER_INPUT_CASES:
        x = rng.integers(0, 3, (3, *shape))
    else:
        x = rng.standard_normal((3, *shape)).astype(layer.dtype or dtype)
    return layer.to(device), x


def _layer_results(layer, x, put):
    y = layer.forward(put(x), training=True)
    dy = np.random.default_rng(2).standard_normal(y.shape).astype(y.dtype)
    dx = layer.backward(put(dy))
    grads = {k: to_host(v) for k, v in layer.named_gradients().items()}
    return to_host(y), None if x.dtype.kind != "f" else to_host(dx), grads


def check_layer(name, draw, dtype, device):
    from handgrad.testing import assert_close
    host_layer, x = _layer_io(name, draw, dtype, "cpu")
    expected = _layer_results(host_layer, x, lambda a: a)
    layer, _ = _layer_io(name, draw, dtype, device.name)
    actual = _layer_results(layer, x, device.put)
    params = max((p.size for p in host_layer.named_parameters().values()), default=0)
    terms = int(np.prod(x.shape[1:])) + params  # at most this many terms in one sum
    used = np.dtype(layer.dtype or (x.dtype if x.dtype.kind == "f" else np.float64))
    for what, a, b in (("y", actual[0], expected[0]), ("dx", actual[1], expected[1]),
                       *((f"d{k}", actual[2][k], v) for k, v in expected[2].items())):
        if b is not None:
            assert_close(a, b, dtype=used, terms=terms, what=f"{name} {what}")
    return {"used_dtype": used.name, "terms": terms}


def run_layers(report, device):
    from handgrad.testing import INTEGER_INPUT_CASES, LAYER_CASES
    table = {**LAYER_CASES, **INTEGER_INPUT_CASES}
    report.note("layers", f"{len(table)} layer cases; a layer with its own dtype runs once")
    for i, (name, draw) in enumerate(sorted(table.items())):
        if report.elapsed() > report.deadline("layers"):
            report.note("layers", f"budget: {len(table) - i} cases not run")
            break
        fixed = draw(np.random.default_rng(0))[0].dtype
        for dtype in (np.float32, np.float64) if fixed is None else (fixed,):
            report.guarded("layers", partial(check_layer, name, draw, dtype, device),
                           name=name, dtype=np.dtype(dtype).name)
    report.write()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="folder for gpu.json, gpu.md")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="seconds for all sections together")
    parser.add_argument("--dry-run", action="store_true",
                        help="NumPy stands in for the device, small sizes")
    parser.add_argument("--only", nargs="*", choices=list(SHARES), default=list(SHARES),
                        help="run only these sections")
    args = parser.parse_args(argv)
    from . import gpu_timing
    try:
        device = Device(args.dry_run)
    except Exception as error:  # no CuPy or no GPU: say so in the output folder too
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu.md").write_text(f"# handgrad device check\n\nno device: {error}\n")
        print(f"no device: {error}", flush=True)
        return 1
    report = Report(args.out, args.budget_s, device)
    print(f"device check on {device.label}; budget {args.budget_s:.0f} s", flush=True)
    runners = {"ops": run_ops, "layers": run_layers, "mnist1d": gpu_timing.run_mnist1d,
               "resnet18": gpu_timing.run_resnet18, "conv": gpu_timing.run_conv}
    for name in args.only:
        print(f"[{report.elapsed():6.1f} s] {name}", flush=True)
        try:
            runners[name](report, device)
        except Exception:  # a section that breaks as a whole is recorded too
            report.note(name, "section error: " + " | ".join(
                traceback.format_exc().strip().splitlines()[-6:]))
        report.write()
    summary = {name: {s: sum(r["status"] == s for r in rows) for s in ("pass", "fail", "error")}
               for name, rows in report.sections.items()}
    print(f"[{report.elapsed():6.1f} s] done: {json.dumps(summary)}", flush=True)
    print(f"wrote {report.out / 'gpu.json'} and {report.out / 'gpu.md'}", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HANDGRAD_NUMBA", "1")
    sys.exit(main())
