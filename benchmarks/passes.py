"""Several passes of a full run merged into one set of rows (``--passes N``).

A pass times every case, each case's rounds back to back beside torch's. On a small
virtual machine a slow spell of some seconds can take every round of the few cases a
pass is timing then and set a verdict alone: in two of five full runs on the 2-core
machine of BENCHMARKS.md the fallback's first float32 GEMM rows ran at half speed
(the grouped convolution 41.6 and 42.5 ms against 16.8-22.3 in the other runs, torch
9.7-12.4 in all five). ``--passes N`` runs N passes in one process, one after the
other, and gives each row the median over the passes of each timed figure: a spell in
one pass of three leaves each median to the other two passes.
"""

from __future__ import annotations

import statistics

MERGED = ("ours_ms", "torch_ms", "ratio", "matmul_pct", "gflops", "speed", "words_per_s")
"""The timed figures of a row; the others (memory, layout, purity, first losses) are the
first pass's."""


def _median(values):
    if isinstance(values[0], tuple):  # (handgrad's, gensim's) words/s
        return tuple(statistics.median(column) for column in zip(*values))
    return statistics.median(values)


def row_key(row):
    return row["case"], row.get("path"), row["dtype"]


def merge_passes(passes):
    """One row per row of the passes (lists of the same rows in the same order): the
    first pass's row with each figure of ``MERGED`` that every pass has replaced by its
    median over the passes; with two passes or more, ``pass_values`` holds each pass's
    ratio (word2vec: speed)."""
    if not passes:
        raise ValueError("merge_passes: expected at least one pass, received none")
    keys = [[row_key(r) for r in rows] for rows in passes]
    if any(k != keys[0] for k in keys[1:]):
        raise ValueError("merge_passes: every pass must have the same rows in the same "
                         f"order; received {[len(k) for k in keys]} rows per pass")
    merged = []
    for versions in zip(*passes):
        row = dict(versions[0])
        for name in MERGED:
            values = [r.get(name) for r in versions]
            if all(v is not None for v in values):
                row[name] = _median(values)
        if len(versions) > 1:
            row["pass_values"] = [r.get("ratio", r.get("speed")) for r in versions]
        merged.append(row)
    return merged
