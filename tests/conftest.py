import os
import sys
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from handgrad.ops._engine import dispatch as _accel

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="module", params=["numpy", "compiled"])
def kernel_path(request):
    """Run a module's op tests on the pure-NumPy kernels and on the compiled ones."""
    if request.param == "compiled" and not _accel.available():
        pytest.skip("numba is not installed: the compiled kernels are not available")
    with _accel.use_compiled(request.param == "compiled"):
        yield request.param


@pytest.fixture
def one_torch_thread():
    """torch on one thread: on a shared, busy machine its worker threads spin-wait."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


_WORKER_ROWS: list = []  # the torch suite's rows that pytest-xdist workers reported


def pytest_sessionfinish(session):
    """In a pytest-xdist worker, hand the torch suite's rows to the controller."""
    import sys
    from dataclasses import asdict

    runner = sys.modules.get("torch_suite.runner")
    if hasattr(session.config, "workeroutput") and runner is not None:
        session.config.workeroutput["torch_suite"] = [
            {**asdict(r), "unsupported": dict(r.unsupported)} for r in runner.RESULTS]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _WORKER_ROWS.extend(getattr(node, "workeroutput", {}).get("torch_suite", []))


def pytest_terminal_summary(terminalreporter):
    """The torch suite's per-row passed / unsupported counts, when its rows ran (in this
    process or in pytest-xdist workers)."""
    import sys
    from collections import Counter

    runner = sys.modules.get("torch_suite.runner")
    results = list(runner.RESULTS) if runner is not None else []
    if _WORKER_ROWS:
        from torch_suite.runner import RowResult

        results += [RowResult(**{**r, "unsupported": Counter(r["unsupported"])})
                    for r in _WORKER_ROWS]
    if not results:
        return
    from torch_suite import report

    results.sort(key=lambda r: r.row)
    terminalreporter.section("torch suite")
    for line in report.row_lines(results):
        terminalreporter.write_line(line)
    terminalreporter.write_line(report.summary_line(results))


# ------------------------------------------------ NumPy standing in for CuPy
class _StandIn(np.ndarray):
    """A "device" array: NumPy's, under a class of a module named cupy."""

    __module__ = "cupy"

    def get(self):
        return np.asarray(self)


def _stand_in(out):
    if type(out) is np.ndarray:
        return out.view(_StandIn)
    return tuple(_stand_in(o) for o in out) if isinstance(out, tuple) else out


def _numpy_function(name):
    value = getattr(np, name)
    if callable(value) and not isinstance(value, type):
        return lambda *args, **kwargs: _stand_in(value(*args, **kwargs))
    return value


def _twin_kernel(inputs, output, body, name):
    """A handgrad ElementwiseKernel of :mod:`handgrad.ops._channel_stats`: its NumPy twin."""
    from handgrad.ops import _channel_stats

    twin = _channel_stats.TWINS[name.removeprefix("handgrad_")][3]
    return lambda *args: _stand_in(twin(*args))


@pytest.fixture
def numpy_as_cupy(monkeypatch):
    """A module named cupy that is NumPy returning :class:`_StandIn` arrays, so that
    device="cuda" takes the device path (placement, moves, host draws) on this machine."""
    fake = types.ModuleType("cupy")
    fake.__getattr__ = _numpy_function
    fake.asarray = lambda array, dtype=None: np.array(array, dtype=dtype).view(_StandIn)
    fake.ndarray = _StandIn
    fake.ElementwiseKernel = _twin_kernel
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 1))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake
