"""BENCHMARKS.md: the tables of a full run (every case on each kernel path, and the
issue's targets, met or not), the machine, the load average and the command."""

from __future__ import annotations

from .targets import geomean, target_lines


def _fmt(value, spec):
    return "" if value is None else format(value, spec)


def _load(value):
    return "n/a" if value is None else f"{value:.2f}"


_PASSES = (" With `--passes`, each figure is its median over the passes (*ratio*: the "
           "median of the passes' ratios, shown in *ratio per pass*), each pass a whole "
           "run of every case (`benchmarks/passes.py`).")


def write_report(path, rows, targets, machine, command, loads):
    """``rows`` of the cases, ``targets`` (``check_targets``'s results), ``loads``: the
    1-minute load average at the start and at the end of the run."""
    passes = any("pass_values" in r for r in rows)
    lines = [
        "# Benchmarks",
        "",
        f"Machine: {machine}. 1-minute load average: {_load(loads[0])} at the start of the "
        f"run, {_load(loads[-1])} at its end.",
        "",
        f"Command: `{command}`. Every case runs on both kernel paths (*path*: `compiled`, "
        "the numba kernels; `numpy`, the pure-NumPy fallback, `HANDGRAD_NUMBA=0`). "
        "Each row is the median of interleaved rounds after warm-up, "
        "forward + backward; torch runs NCHW or channels_last, whichever was faster "
        "in a few calls timed before the rounds (column *torch layout*), with passive "
        "OpenMP waiting (`OMP_WAIT_POLICY=PASSIVE`, set by the harness unless given: "
        "spinning workers distorted both columns). "
        "*ratio* = handgrad / torch (< 1: handgrad is faster). "
        "*% matmul* is the time of bare NumPy matmuls with the same FLOPs divided by "
        "handgrad's time. *peak MB* is the peak of temporary allocations during forward + "
        "backward (tracemalloc), *cache MB* what the cache holds besides the op's inputs."
        + (_PASSES if passes else ""),
        "",
        "| case | path | dtype | handgrad ms | torch ms | ratio | torch layout | % matmul "
        "| GFLOP/s | peak MB | cache MB |" + (" ratio per pass |" if passes else ""),
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|" + ("---|" if passes else ""),
    ]
    for r in rows:
        if "words_per_s" in r:
            continue  # listed below the table
        per_pass = " / ".join(f"{v:.2f}" for v in r.get("pass_values", ()) if v is not None)
        lines.append(
            f"| {r['case']} | {r.get('path', '')} | {r['dtype']} | "
            f"{_fmt(r.get('ours_ms'), '.2f')} | "
            f"{_fmt(r.get('torch_ms'), '.2f')} | {_fmt(r.get('ratio'), '.2f')} | "
            f"{r.get('torch_layout', '')} | {_fmt(r.get('matmul_pct'), '.0f')} | "
            f"{_fmt(r.get('gflops'), '.1f')} | {_fmt(r.get('peak_mb'), '.1f')} | "
            f"{_fmt(r.get('cache_mb'), '.2f')} |" + (f" {per_pass} |" if passes else "")
        )
    lines.append("")
    for kernels in dict.fromkeys(r.get("path") for r in rows):
        for dtype in ("float32", "float64"):
            ratios = [r["ratio"] for r in rows if r.get("group") == "conv"
                      and r.get("path") == kernels and r["dtype"] == dtype]
            if ratios:
                lines.append(f"- Geometric mean of the conv ratios ({kernels}, {dtype}): "
                             f"{geomean(ratios):.2f}")
    for r in rows:
        if "first_loss_rel_err" in r:
            lines.append(f"- {r['case']} ({r['path']}): first loss handgrad "
                         f"{r['first_losses'][0]:.6f}, torch {r['first_losses'][1]:.6f} "
                         f"(relative difference {r['first_loss_rel_err']:.1e}): the same "
                         f"computation.")
    for r in rows:
        if "words_per_s" in r:
            (ours, theirs), (purity, their_purity) = r["words_per_s"], r["purity"]
            lines.append(f"- {r['case']} ({r['path']}, one epoch, one thread): handgrad "
                         f"{ours:,.0f} words/s, gensim {theirs:,.0f} ({r['speed']:.2f}x); "
                         f"neighbour purity after that epoch {purity:.3f} and {their_purity:.3f}.")
    lines += ["", "## Targets", "",
              "The issue's targets, checked against the rows above (*worst row*: the row "
              "furthest from the limit, or how many rows a geometric mean takes).", "",
              *target_lines(targets)]
    kept = _kept_sections(path)  # read before the file is truncated
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n" + kept)


# The sections below this line of BENCHMARKS.md are written by hand (the torch suite, the
# training runs, word2vec) and kept when a run regenerates the tables above it.
KEPT = "\n<!-- written by hand below: python -m benchmarks keeps what follows -->"


def _kept_sections(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    start = text.find(KEPT)
    return text[start:] if start >= 0 else ""
