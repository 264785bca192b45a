"""Facts about the machine a benchmark ran on, read one way by every benchmark."""

from __future__ import annotations


def load_average():
    """The 1-minute load average (/proc/loadavg), or None where there is none."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
