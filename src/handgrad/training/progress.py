"""A one-line progress bar per epoch: redrawn in a terminal (with the estimated time
left in the epoch), a single summary line with the epoch's time otherwise (and always
with ``verbose=2``, Keras's one line per epoch), nothing when disabled.
:class:`ProgbarLogger` sets the bar of ``fit``'s epochs from a callback."""

from __future__ import annotations

import sys
import time

from .._checks import choice, describe, is_int
from .hooks import Callback


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
    samples = False  # the steps counted are examples (ProgbarLogger's count_mode)
    stateful: tuple = ()  # keys shown as the last value given to update (see run_epoch)

    def __init__(self, total, title, enabled=True, stream=None, clock=time.perf_counter,
                 redraw=True):
        self.total = None if total is None else max(int(total), 1)  # None: unknown
        self.title = title
        self.stream = stream or sys.stdout
        self.enabled = enabled
        self.interactive = (enabled and redraw
                            and getattr(self.stream, "isatty", lambda: False)())
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


def check_verbose(op, verbose):
    """``verbose`` of ``fit``: 0 (silent), 1 (a bar), 2 (one line per epoch), "auto"
    (1, as Keras's) or a bool; returned as 0, 1 or 2."""
    if verbose == "auto":
        return 1
    if not (is_int(verbose) or isinstance(verbose, bool)) or verbose not in (0, 1, 2):
        raise ValueError(f"{op}: 'verbose' must be 0 (silent), 1 (a progress bar), 2 (one "
                         f"line per epoch) or 'auto'; received {describe(verbose)}")
    return int(verbose)


class ProgbarLogger(Callback):
    """Keras's ProgbarLogger: the progress bar of ``fit``'s epochs, set by a callback.

    ``verbose``: 0, 1, 2 or "auto" as ``fit``'s (None: ``fit``'s own), given to the bar
    of every epoch; ``count_mode``: "steps" (the bar counts batches, Keras 3's) or
    "samples" (examples, Keras 2's default); ``stateful_metrics``: log keys shown as
    their last batch's value rather than the epoch's running mean (the streaming metrics
    always are). Display only: the epoch logs are the same. Under MPI only rank 0 draws."""

    rank_zero_only = True

    def __init__(self, count_mode="steps", stateful_metrics=None, verbose=None):
        op = "ProgbarLogger"
        self.count_mode = choice(op, "count_mode", count_mode, ("steps", "samples"))
        names = () if stateful_metrics is None else stateful_metrics
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise TypeError(f"{op}: 'stateful_metrics' must be None or a list of log keys; "
                            f"received {describe(stateful_metrics)}")
        self.stateful_metrics = tuple(names)
        self.verbose = None if verbose is None else check_verbose(op, verbose)

    def bar(self, title, steps, batch_size, examples, verbose) -> ProgressBar:
        """The bar of one epoch of ``steps`` batches of ``batch_size`` out of
        ``examples`` (None: unknown), ``fit`` given ``verbose``."""
        verbose = verbose if self.verbose is None else self.verbose
        total = steps
        if self.count_mode == "samples" and steps is not None:
            total = steps * batch_size if examples is None else \
                min(steps * batch_size, examples)
        bar = ProgressBar(total, title, enabled=verbose > 0, redraw=verbose == 1)
        bar.samples, bar.stateful = self.count_mode == "samples", self.stateful_metrics
        return bar


def epoch_bar(callbacks, title, steps, batch_size, examples, verbose) -> ProgressBar:
    """The bar of a ``fit`` epoch: that of the last :class:`ProgbarLogger` in
    ``callbacks``, else one counting steps at ``fit``'s ``verbose``."""
    loggers = [c for c in callbacks if isinstance(c, ProgbarLogger)]
    logger = loggers[-1] if loggers else ProgbarLogger()
    return logger.bar(title, steps, batch_size, examples, verbose)
