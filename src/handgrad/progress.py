"""A one-line progress bar per epoch: redrawn in a terminal, a single summary line
otherwise, nothing when disabled."""

from __future__ import annotations

import sys


def format_logs(logs) -> str:
    parts = []
    for key, value in logs.items():
        if key == "seconds":
            parts.append(f"{value:.1f}s")
        elif key == "lr":
            parts.append(f"lr {value:.3g}")
        else:
            parts.append(f"{key} {value:.4f}")
    return "  ".join(parts)


class ProgressBar:
    """``update(step, logs, examples_per_second)`` then ``finish(logs)``."""

    width = 24

    def __init__(self, total, title, enabled=True, stream=None):
        self.total = max(int(total), 1)
        self.title = title
        self.stream = stream or sys.stdout
        self.enabled = enabled
        self.interactive = enabled and getattr(self.stream, "isatty", lambda: False)()
        self.speed = 0.0

    def _line(self, step, logs):
        filled = int(self.width * step / self.total)
        bar = "=" * filled + (">" if filled < self.width else "") + " " * (self.width - filled)
        return (f"{self.title} [{bar[: self.width]}] {step}/{self.total}  {format_logs(logs)}  "
                f"{self.speed:,.0f} ex/s")

    def update(self, step, logs, examples_per_second):
        self.speed = examples_per_second
        if self.interactive:
            self.stream.write("\r" + self._line(step, logs))
            self.stream.flush()

    def finish(self, logs):
        if not self.enabled:
            return
        prefix = "\r" if self.interactive else ""
        self.stream.write(prefix + self._line(self.total, logs) + "\n")
        self.stream.flush()
