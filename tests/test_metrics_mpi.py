"""Streaming metrics under ``mpiexec -n 2`` and ``-n 3`` equal one process's: every process
adds its counts (true/false positives, the AUC's confusion counts per threshold) and the
figure is computed once from the sums. An average of the processes' own figures would
differ, since the data split unevenly (see ``metric_case``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import metric_case
from handgrad.testing import tolerance
from mpi_support import mpirun

SCRIPT = Path(__file__).resolve().parent / "mpi_scripts" / "streaming_metrics.py"


@pytest.mark.parametrize("k", [2, 3])
def test_streaming_metrics_sum_counts_over_processes(k, tmp_path):
    mpirun(k, [sys.executable, SCRIPT, tmp_path])
    single = metric_case.run(distributed=False)
    for rank in range(k):
        logs = json.loads((tmp_path / f"metrics.rank{rank}.json").read_text())
        for phase in ("fit", "evaluate"):
            for name in ("precision", "recall", "auc"):
                # counts are integers (exact); the loss and AUC's sums are over at most
                # 101 terms in another order
                assert logs[phase][name] == pytest.approx(
                    single[phase][name], abs=tolerance(np.float64, terms=101)), \
                    (rank, phase, name)
