"""Run torch's own test inputs (``op_db``'s ``nn.functional`` rows, ``module_db``) through
the adapters and count, per row: passed, unsupported (by reason), mismatches, crashes."""

from __future__ import annotations

import functools
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch

from .core import Mismatch, Unsupported, run_error, run_plan
from .helpers import with_grad
from .registry import MODULES, OPS

PREFIX = "nn.functional."
#: the rows run in this session, for the pytest summary
RESULTS: list = []


@dataclass
class RowResult:
    row: str
    passed: int = 0
    unsupported: Counter = field(default_factory=Counter)
    mismatches: list = field(default_factory=list)
    crashes: list = field(default_factory=list)
    mapped: bool = True

    @property
    def samples(self):
        return (self.passed + sum(self.unsupported.values()) + len(self.mismatches)
                + len(self.crashes))

    def record(self, what, fn, *args, **kwargs):
        try:
            fn(*args, **kwargs)
            self.passed += 1
        except Unsupported as exc:
            self.unsupported[exc.reason] += 1
        except Mismatch as exc:
            self.mismatches.append(f"{what}: {exc}")
        except (ValueError, TypeError) as exc:  # handgrad refuses a sample torch takes
            reason = refusal(exc)
            if reason is None:  # not handgrad's own message: a NumPy error leaked out
                self.crashes.append(f"{what}: {type(exc).__name__}: {exc}")
            else:
                self.unsupported[reason] += 1
        except Exception as exc:
            self.crashes.append(f"{what}: {type(exc).__name__}: {exc}")


def refusal(exc):
    """A short reason for handgrad's refusal, ``refused: <op> '<argument>'`` (handgrad's
    messages name the op and the argument), or None for any other message."""
    found = re.match(r"(\w+): (?:\w+ )?'(\w+)'", str(exc))
    return f"refused: {found[1]} '{found[2]}'" if found else None


def op_name(op):
    name = op.name[len(PREFIX):]
    return f"{name}.{op.variant_test_name}" if op.variant_test_name else name


def op_rows():
    """{row name: OpInfo} of every ``nn.functional`` row of torch's ``op_db``."""
    from torch.testing._internal.common_methods_invocations import op_db

    return {op_name(op): op for op in op_db if op.name.startswith(PREFIX)}


def module_rows():
    """{row name: ModuleInfo} of torch's ``module_db`` (name + variant)."""
    from torch.testing._internal.common_modules import module_db

    rows = {}
    for info in module_db:
        name = info.module_cls.__name__
        variant = getattr(info, "variant_name", "")
        rows[f"{name}.{variant}" if variant else name] = info
    return rows


def _quiet():
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    torch.set_num_threads(1)  # tiny tensors: threads only contend


def spread(items, limit):
    """At most ``limit`` of ``items`` (a list), evenly spread (all when ``limit`` is None)."""
    if limit is None or len(items) <= limit:
        return list(enumerate(items))
    step = len(items) / limit
    return [(int(k * step), items[int(k * step)]) for k in range(limit)]


def _run_op(adapter, op, sample, dtype, seed):
    run_plan(adapter(op, sample), dtype, seed=seed)


def _run_module(adapter, info, module_input, training, dtype, seed):
    run_plan(adapter(info, module_input, training), dtype, seed=seed)


def run_op_row(name, op, limit=None):
    """Every sample (or ``limit`` per dtype, spread evenly) and error input of a row."""
    result = RowResult(f"F.{name}", mapped=name in OPS)
    adapter = OPS.get(name)
    threads = torch.get_num_threads()
    with warnings.catch_warnings():
        _quiet()
        for dtype in ("float32", "float64"):
            tdtype = getattr(torch, dtype)
            samples = list(op.sample_inputs("cpu", tdtype, requires_grad=True))
            for i, sample in spread(samples, limit):
                if adapter is None:
                    result.unsupported["no adapter"] += 1
                    continue
                result.record(f"{dtype} sample {i}", _run_op, adapter, op, sample, dtype, i)
        errors = op.error_inputs("cpu") if op.error_inputs_func is not None else []
        for i, error in enumerate(errors):
            if adapter is None:
                result.unsupported["no adapter"] += 1
                continue
            result.record(f"error input {i}", run_error, functools.partial(adapter, op),
                          with_grad(error.sample_input))
    torch.set_num_threads(threads)
    return result


def run_module_row(name, info, limit=None):
    """Every module input (or ``limit`` per dtype and mode), training and eval modes."""
    result = RowResult(name, mapped=name in MODULES)
    adapter = MODULES.get(name)
    threads = torch.get_num_threads()
    modes = (True, False) if info.train_and_eval_differ else (True,)
    with warnings.catch_warnings():
        _quiet()
        for dtype in ("float32", "float64"):
            for training in modes:
                inputs = info.module_inputs_func(info, device="cpu", dtype=getattr(torch, dtype),
                                                 requires_grad=True, training=training)
                for i, module_input in spread(list(inputs), limit):
                    if adapter is None:
                        result.unsupported["no adapter"] += 1
                        continue
                    result.record(f"{dtype} {'train' if training else 'eval'} sample {i}",
                                  _run_module, adapter, info, module_input, training, dtype, i)
    torch.set_num_threads(threads)
    return result
