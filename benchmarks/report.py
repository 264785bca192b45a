"""BENCHMARKS.md: the table of a full run, the machine and the command."""

from __future__ import annotations

import math


def _fmt(value, spec):
    return "" if value is None else format(value, spec)


def _geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def write_report(path, rows, machine, command):
    lines = [
        "# Benchmarks",
        "",
        f"Machine: {machine}.",
        "",
        f"Command: `{command}`. Each row is the median of interleaved rounds after warm-up, "
        "forward + backward; torch runs NCHW or channels_last, whichever was faster "
        "(column *torch layout*). *ratio* = handgrad / torch (< 1: handgrad is faster). "
        "*% matmul* is the time of bare NumPy matmuls with the same FLOPs divided by "
        "handgrad's time. *peak MB* is the peak of temporary allocations during forward + "
        "backward (tracemalloc), *cache MB* what the cache holds besides the op's inputs.",
        "",
        "| case | dtype | handgrad ms | torch ms | ratio | torch layout | % matmul | GFLOP/s "
        "| peak MB | cache MB |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['dtype']} | {_fmt(r.get('ours_ms'), '.2f')} | "
            f"{_fmt(r.get('torch_ms'), '.2f')} | {_fmt(r.get('ratio'), '.2f')} | "
            f"{r.get('torch_layout', '')} | {_fmt(r.get('matmul_pct'), '.0f')} | "
            f"{_fmt(r.get('gflops'), '.1f')} | {_fmt(r.get('peak_mb'), '.1f')} | "
            f"{_fmt(r.get('cache_mb'), '.2f')} |"
        )
    convs = [r for r in rows if r["case"][0] in "1234567" and r["case"][1] == " "]
    for dtype in ("float32", "float64"):
        ratios = [r["ratio"] for r in convs if r["dtype"] == dtype]
        lines.append("")
        lines.append(f"Geometric mean of the conv ratios (cases 1-7, {dtype}): "
                     f"{_geomean(ratios):.2f}")
    epochs = [r for r in rows if "first_loss_rel_err" in r]
    if epochs:
        lines.append("")
        for r in epochs:
            lines.append(f"- {r['case']}: first loss handgrad {r['first_losses'][0]:.6f}, torch "
                         f"{r['first_losses'][1]:.6f} (relative difference "
                         f"{r['first_loss_rel_err']:.1e}): the same computation.")
    kept = _kept_sections(path)  # read before the file is truncated
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n" + kept)


KEPT = "\n## Default networks"  # written by hand (training runs), kept across regenerations


def _kept_sections(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    start = text.find(KEPT)
    return text[start:] if start >= 0 else ""
