"""A one-line progress bar per epoch: redrawn in a terminal (with the estimated time
left in the epoch), a single summary line with the epoch's time otherwise, nothing
when disabled."""

from __future__ import annotations

import sys
import time


def format_duration(seconds) -> str:
    """``"42s"``, ``"3:07"`` (minutes:seconds) or ``"1:02:03"`` (hours)."""
    total = max(round(float(seconds)), 0)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}" if minutes else f"{secs}s"


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
    """``update(step, logs, examples_per_second)`` then ``finish(logs)``.

    While running, the line shows ``ETA`` = time so far x steps left / steps done
    (``clock`` is the time source); the final line shows the epoch's ``seconds``.
    """

    width = 24

    def __init__(self, total, title, enabled=True, stream=None, clock=time.perf_counter):
        self.total = None if total is None else max(int(total), 1)  # None: unknown
        self.title = title
        self.stream = stream or sys.stdout
        self.enabled = enabled
        self.interactive = enabled and getattr(self.stream, "isatty", lambda: False)()
        self.speed = 0.0
        self.clock = clock
        self.start = clock()
        self._drawn = 0  # length of the longest line drawn, to blank what a shorter one leaves

    def _line(self, step, logs, extra=""):
        total = step if self.total is None else self.total
        filled = int(self.width * step / max(total, 1))
        bar = "=" * filled + (">" if filled < self.width else "") + " " * (self.width - filled)
        fields = "  ".join(part for part in (format_logs(logs), extra) if part)
        of = "?" if self.total is None else self.total
        return f"{self.title} [{bar[: self.width]}] {step}/{of}  {fields}  " \
               f"{self.speed:,.0f} ex/s"

    def eta(self, step) -> float:
        """Seconds left in the epoch at the rate of the first ``step`` steps."""
        elapsed = self.clock() - self.start
        return elapsed * ((self.total or step) - step) / max(step, 1)

    def _draw(self, line, end=""):
        padding = " " * max(self._drawn - len(line), 0)
        self._drawn = max(self._drawn, len(line))
        self.stream.write("\r" + line + padding + end)
        self.stream.flush()

    def update(self, step, logs, examples_per_second):
        self.speed = examples_per_second
        if self.interactive:
            self._draw(self._line(step, logs, f"ETA {format_duration(self.eta(step))}"))

    def finish(self, logs, step=None):
        """The final line (``step``: the steps done, when the total was unknown)."""
        if not self.enabled:
            return
        line = self._line(self.total or step or 0, logs)
        if self.interactive:
            self._draw(line, "\n")
        else:
            self.stream.write(line + "\n")
            self.stream.flush()
