"""Run by ``tests/test_metrics_mpi.py`` as ``mpiexec -n K python streaming_metrics.py OUT``.

Fits and evaluates the model of :func:`metric_case.build` with ``distributed=True``
(learning rate 0, so that every batch sees the same weights) and writes rank's logs to
``OUT/metrics.rank<r>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import handgrad.distributed as dist
from metric_case import run

if __name__ == "__main__":
    logs = run(distributed=True)
    Path(sys.argv[1], f"metrics.rank{dist.rank()}.json").write_text(json.dumps(logs))
