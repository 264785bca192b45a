"""PyTorch's own test inputs through handgrad: every ``nn.functional`` row of torch's
``op_db`` and every ``module_db`` row, one test per row (every sample, float32 and
float64, and its error inputs); a row fails on any mismatch or crash. The per-row
passed / unsupported counts print in the session summary; the same run writes
docs/torch_suite.md (``PYTHONPATH=src:tests python -m torch_suite --write ...``)."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch's test inputs import it

from torch_suite import runner

#: samples per row and dtype (None: all of them; about a minute and a half on 2 cores)
LIMIT = None
OP_ROWS = runner.op_rows()
MODULE_ROWS = runner.module_rows()


def _check(result):
    runner.RESULTS.append(result)
    problems = result.mismatches + result.crashes
    assert not problems, f"{result.row}: " + "; ".join(problems[:5])


@pytest.mark.parametrize("name", sorted(OP_ROWS))
def test_op_row(name):
    _check(runner.run_op_row(name, OP_ROWS[name], LIMIT))


@pytest.mark.parametrize("name", sorted(MODULE_ROWS))
def test_module_row(name):
    _check(runner.run_module_row(name, MODULE_ROWS[name], LIMIT))
