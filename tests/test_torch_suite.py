"""PyTorch's own test inputs through handgrad: every ``nn.functional`` row of torch's
``op_db`` and every ``module_db`` row, one test per row (every sample, float32 and
float64, and its error inputs); a row fails on any mismatch or crash. The per-row
passed / unsupported counts print in the session summary; the same run writes
docs/torch_suite.md (``PYTHONPATH=src:tests python -m torch_suite --write ...``)."""

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch's test inputs import it

from torch_suite import runner

#: samples per row and dtype (None: all of them; about a minute and a half on 2 cores)
LIMIT = None
OP_ROWS = runner.op_rows()
MODULE_ROWS = runner.module_rows()


REPORT = Path(__file__).resolve().parents[1] / "docs" / "torch_suite.md"


def documented_unsupported() -> dict:
    """Row -> unsupported samples, from the per-row table of docs/torch_suite.md."""
    table = REPORT.read_text().split("\n## Per row\n", 1)[1]
    cells = (line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| "))
    return {c[0].strip(): int(c[2]) for c in cells if len(c) == 6 and c[2].strip().isdigit()}


DOCUMENTED = documented_unsupported()


def _check(result):
    runner.RESULTS.append(result)
    problems = result.mismatches + result.crashes
    assert not problems, f"{result.row}: " + "; ".join(problems[:5])
    # a refusal counts as "unsupported", not as a failure: a check that starts refusing what
    # torch takes would pass silently, so a row may not lose ground against the report
    unsupported = sum(result.unsupported.values())
    if LIMIT is None and result.row in DOCUMENTED:
        assert unsupported <= DOCUMENTED[result.row], (
            f"{result.row}: {unsupported} unsupported samples, {DOCUMENTED[result.row]} in "
            f"docs/torch_suite.md ({dict(result.unsupported)}); if that is meant, regenerate "
            f"the report")


@pytest.mark.parametrize("name", sorted(OP_ROWS))
def test_op_row(name):
    _check(runner.run_op_row(name, OP_ROWS[name], LIMIT))


@pytest.mark.parametrize("name", sorted(MODULE_ROWS))
def test_module_row(name):
    _check(runner.run_module_row(name, MODULE_ROWS[name], LIMIT))
