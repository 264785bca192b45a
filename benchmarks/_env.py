"""The environment of a timed run, set before NumPy and torch load (they read it then)."""

from __future__ import annotations

import os


def set_defaults():
    """Both libraries get the same thread count (BLAS reads these before NumPy loads), and
    torch's OpenMP workers wait passively: spinning after each op, on the cores that the
    next timed call (handgrad's, or BLAS's threads) needs, they had made torch's own times
    swing up to 30x between rounds. Passive waiting made torch's times steady and never
    slower. Variables already set are kept."""
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "2")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
