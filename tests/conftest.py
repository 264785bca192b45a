import os

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
