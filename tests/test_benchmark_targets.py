"""The benchmark harness's target table (benchmarks/targets.py): which rows a target takes,
how it aggregates them and when it is met; and the report it writes (no timing)."""

from __future__ import annotations

import math
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.append(ROOT)

from benchmarks.targets import (  # noqa: E402
    PATHS,
    TARGETS,
    Target,
    check_targets,
    in_group,
    numbered,
    target_lines,
)


def row(case, ratio, path="compiled", group="conv", dtype="float32", **more):
    return {"case": case, "ratio": ratio, "path": path, "group": group, "dtype": dtype, **more}


ROWS = [
    row("1 conv a", 0.8, matmul_pct=65.0),
    row("2 conv b", 1.2, matmul_pct=55.0),
    row("3 conv c", 0.5, dtype="float64"),
    row("1 conv a", 2.5, path="numpy"),
    row("8a pool", 0.9, group="pool"),
    row("8a pool", 3.5, path="numpy", group="pool"),
    row("13 resnet", 1.1, group="model"),
]


def results_by(target, rows=ROWS):
    return {r["path"]: r for r in check_targets(rows, [target])}


def test_each_reports_the_worst_row_of_its_path_and_group():
    result = results_by(Target("conv", in_group("conv"), "compiled", "ratio", 1.0))["compiled"]
    assert (result["measured"], result["met"]) == (1.2, False)
    assert result["worst"] == "2 conv b (float32)"
    loose = results_by(Target("conv", in_group("conv"), "compiled", "ratio", 1.25))
    assert loose["compiled"]["met"] is True


def test_geomean_and_a_floor():
    mean = results_by(Target("g", in_group("conv"), "compiled", "ratio", 0.9,
                             aggregate="geomean"))["compiled"]
    assert math.isclose(mean["measured"], (0.8 * 1.2 * 0.5) ** (1 / 3))
    assert mean["met"] is True
    floor = results_by(Target("m", numbered("1", "2"), "compiled", "matmul_pct", 60.0,
                              at_least=True))["compiled"]
    assert (floor["measured"], floor["met"]) == (55.0, False)  # the lowest, not the highest


def test_a_target_on_no_path_is_checked_on_each_and_missing_rows_are_not_measured():
    results = results_by(Target("r", in_group("model"), None, "ratio", 1.3))
    assert results["compiled"]["met"] is True
    assert results["numpy"]["measured"] is None and results["numpy"]["met"] is None
    lines = target_lines(check_targets(ROWS, [Target("r", in_group("model"), None, "ratio",
                                                     1.3)]))
    assert lines[2].endswith("| met |") and lines[3].endswith("| not measured |")


def test_the_issue_targets_cover_both_paths():
    results = check_targets(ROWS, TARGETS)
    fallback = [r for r in results if r["path"] == "numpy" and r["measured"] is not None]
    assert any(r["measured"] == 3.5 and r["met"] is False for r in fallback)
    measured = {r["path"] for r in results if r["measured"] is not None}
    assert measured == {"compiled", "numpy"}  # some target found rows on each path


def test_the_fallback_limit_takes_every_case_with_a_ratio():
    """The NumPy path's 3x: "no case slower than 3x torch", breadth and composite rows
    too; the breadth group's own fallback line reports the same row."""
    fallback = [r for r in TARGETS if r.path == "numpy"]
    rows = [row("14c bilinear", 3.2, path="numpy", group="breadth"),
            row("11 mha", 1.0, path="numpy", group="composite")]
    measured = [r for r in check_targets(rows, fallback) if r["measured"] is not None]
    assert {r["target"] for r in measured} == {"every case / torch",
                                               "every breadth case / torch"}
    assert all((r["worst"], r["met"]) == ("14c bilinear (float32)", False) for r in measured)
    rows[0]["ratio"] = 2.0
    measured = [r for r in check_targets(rows, fallback) if r["measured"] is not None]
    assert len(measured) == 2 and all(r["met"] is True for r in measured)


def test_the_issue_limits_hold_the_compiled_path_and_the_fallback_is_held_to_3x():
    """The reading of the issue that TARGETS encodes: every limit of its own (conv, pools,
    % matmul, breadth 1.5, word2vec, ResNet-18 1.3) is on the default install's compiled
    path; every fallback line's limit is the issue's 3x for the fallback."""
    by_path = {}
    for target in TARGETS:
        assert target.path in PATHS, target.name  # none left for both paths at one limit
        by_path.setdefault(target.path, []).append(target)
    assert {(t.metric, t.limit) for t in by_path["numpy"]} == {("ratio", 3.0)}
    limits = {t.name: t.limit for t in by_path["compiled"]}
    assert limits["every breadth case / torch"] == 1.5
    assert limits["ResNet-18 training step / torch"] == 1.3
    breadth = [row("17c adaptive_max", 1.6, group="breadth"),
               row("17c adaptive_max", 1.6, path="numpy", group="breadth")]
    met = {r["path"]: r["met"] for r in check_targets(breadth, TARGETS)
           if r["target"] == "every breadth case / torch"}
    assert met == {"compiled": False, "numpy": True}


def test_every_case_group_has_a_target():
    """A case's group that no target selects (a typo, a new group without its target)
    would leave its rows unchecked, silently."""
    pytest.importorskip("torch")
    from benchmarks.run import ALL_CASES, group_of

    groups = {group_of(case) for case in ALL_CASES} - {"composite"}
    assert groups and all(any(t.select({"group": g, "case": ""}) for t in TARGETS)
                          for g in groups), groups


@pytest.mark.parametrize("kwargs, word", [({"aggregate": "mean"}, "aggregate"),
                                          ({"path": "gpu"}, "path")])
def test_a_bad_target_is_refused_by_name(kwargs, word):
    args = {"name": "t", "select": in_group("conv"), "path": "compiled", "metric": "ratio",
            "limit": 1.0, **kwargs}
    with pytest.raises(ValueError, match=word):
        Target(**args)


def test_the_report_has_the_targets_and_the_load_average(tmp_path):
    from benchmarks.report import write_report
    path = tmp_path / "report.md"
    write_report(path, ROWS, check_targets(ROWS), "test machine", "python -m benchmarks",
                 [0.5, 1.25])
    text = path.read_text()
    assert "load average: 0.50 at the start of the run, 1.25 at its end" in text
    assert "## Targets" in text and "| NOT MET |" in text
    assert "- Geometric mean of the conv ratios (numpy, float32): 2.50" in text


def test_passes_merge_into_each_rows_medians():
    from benchmarks.passes import merge_passes
    passes = [[row("1 conv a", r, ours_ms=o, torch_ms=t, peak_mb=m),
               {"case": "word2vec sg", "path": "compiled", "dtype": "float32",
                "group": "word2vec", "speed": s, "words_per_s": (w, 100.0)}]
              for r, o, t, m, s, w in ((0.9, 9.0, 10.0, 1.0, 1.2, 120.0),
                                       (2.1, 21.0, 10.0, 2.0, 0.8, 80.0),
                                       (0.8, 8.0, 10.0, 3.0, 1.1, 110.0))]
    conv, words = merge_passes(passes)
    assert (conv["ratio"], conv["ours_ms"], conv["torch_ms"]) == (0.9, 9.0, 10.0)
    assert conv["peak_mb"] == 1.0  # not a timed figure: the first pass's
    assert conv["pass_values"] == [0.9, 2.1, 0.8]
    assert (words["speed"], words["words_per_s"]) == (1.1, (110.0, 100.0))
    single = merge_passes(passes[:1])
    assert single == passes[0]  # one pass: the rows as they were, no per-pass column


def test_passes_with_other_rows_are_refused_by_name():
    from benchmarks.passes import merge_passes
    with pytest.raises(ValueError, match="same rows"):
        merge_passes([[row("1 conv a", 1.0)], [row("2 conv b", 1.0)]])
    with pytest.raises(ValueError, match="at least one pass"):
        merge_passes([])


def test_the_report_shows_each_pass_ratio(tmp_path):
    from benchmarks.passes import merge_passes
    from benchmarks.report import write_report
    rows = merge_passes([ROWS, [{**r, "ratio": r["ratio"] * 2} for r in ROWS]])
    path = tmp_path / "report.md"
    write_report(path, rows, check_targets(rows), "test machine", "python -m benchmarks",
                 [0.5, 1.25])
    text = path.read_text()
    assert "ratio per pass |" in text and "| 0.80 / 1.60 |" in text
    assert "each figure is its median over the passes" in text
