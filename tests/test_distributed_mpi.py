"""Data-parallel training under ``mpiexec -n 2``, ``-n 3`` and ``-n 4`` against one
process.

``tests/mpi_scripts/train_cases.py`` trains the cases of ``distributed_cases`` (a CNN, an
MLP whose last batch leaves some processes empty-handed, BatchNorm + Dropout through
``fit`` with validation, a residual graph model, the README's explicit loop) and a
checkpoint resume; this module trains the same cases in one process and compares.

Tolerance: K processes add the same terms as one process in another order, so the
weights agree "up to the order of floating-point sums". How far such rounding
differences travel along a training run is measured on the case itself: one process
trains again from initial weights moved by one rounding step (relative ``eps``), and the
distance between the two runs (``spread``) is how far one-ulp differences grow; a
rounding difference enters at every step, so the bound is ``steps * spread`` (at least
:func:`handgrad.testing.tolerance` of the weights). A wrong gradient weighting, local
batch statistics or per-process dropout masks move the weights by ~1e-3, far beyond it.

Every run has a timeout, and the module skips when mpi4py or mpiexec is missing
(``mpi_support``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import distributed_cases as cases
from handgrad.testing import tolerance
from mpi_scripts.faults import MESSAGES
from mpi_support import mpirun

SCRIPTS = Path(__file__).resolve().parent / "mpi_scripts"
EPS = float(np.finfo(np.float64).eps)


def python(script, *args):
    return [sys.executable, SCRIPTS / script, *args]


@pytest.fixture(scope="module", params=[2, 3, 4], ids=lambda k: f"{k}-processes")
def job(request, tmp_path_factory):
    """``(K, output folder, stdout)`` of one run of train_cases.py on K processes."""
    out = tmp_path_factory.mktemp(f"mpi{request.param}")
    done = mpirun(request.param, python("train_cases.py", out))
    return request.param, out, done.stdout


@pytest.fixture(scope="module")
def single():
    """Every case trained in one process, and its spread (see the module docstring)."""
    runs = {}
    for case in cases.CASES:
        net, history = cases.train(case, distributed=False)
        bumped, _ = cases.train(case, distributed=False, perturb=EPS)
        reference, other = cases.state(net), cases.state(bumped)
        spread = max(float(np.abs(reference[k] - other[k]).max()) for k in reference)
        runs[case] = net, history, reference, spread
    return runs


def loaded(out, name, rank):
    arrays = np.load(out / f"{name}.rank{rank}.npz")
    logs = out / f"{name}.rank{rank}.json"
    return dict(arrays), json.loads(logs.read_text()) if logs.exists() else None


def weights_limit(reference, spread, steps):
    scale = max(float(np.abs(v).max()) for v in reference.values())
    return steps * max(spread, tolerance(np.float64, terms=steps, scale=scale))


def steps_of(case):
    n = cases.EXAMPLES[case] - (cases.EXAMPLES[case] // 5 if case == "bn_dropout" else 0)
    return cases.EPOCHS * -(-n // cases.BATCH[case])


def max_difference(a, b, names):
    return max(float(np.abs(a[k] - b[k]).max()) for k in names)


@pytest.mark.parametrize("case", cases.CASES)
def test_k_processes_train_the_one_process_model(job, single, case):
    k, out, _ = job
    _, history, reference, spread = single[case]
    limit = weights_limit(reference, spread, steps_of(case))
    states = [loaded(out, case, rank) for rank in range(k)]
    first, logs = states[0]
    assert max_difference(first, reference, reference) <= limit
    for other, _ in states[1:]:  # the optimizer stepped identically on every rank
        assert all(np.array_equal(other[name], first[name]) for name in reference)
    # the logs are the global batch's means: the same history as one process
    for key, values in history.history.items():
        if key != "seconds":
            np.testing.assert_allclose(logs["history"][key], values, rtol=0,
                                       atol=tolerance(np.float64, terms=steps_of(case),
                                                      scale=max(map(abs, values)) + limit))


@pytest.mark.parametrize("case", cases.CASES)
def test_evaluate_and_predict_cover_the_whole_data_set(job, single, case):
    _, out, _ = job
    net = single[case][0]
    arrays, logs = loaded(out, case, 0)
    for name, value in net.named_parameters().items():
        value[...] = arrays[name]  # the distributed weights, in one process
    for name, value in net.named_buffers().items():
        value[...] = arrays[f"buffer:{name}"]
    x, y = cases.data(case)
    for name, rows in (("evaluate", slice(None)), ("evaluate_two", slice(2))):
        # 2 rows: a rank has none
        expected = net.evaluate(x[rows], y[rows], batch_size=4, return_dict=True)
        assert logs[name].keys() == expected.keys()
        for key, value in expected.items():
            assert abs(logs[name][key] - value) <= tolerance(np.float64, terms=len(x),
                                                             scale=max(abs(value), 1.0))
    predicted = net.predict(x, batch_size=4)
    assert arrays["predict"].shape == predicted.shape == (len(x), 3)
    np.testing.assert_allclose(arrays["predict"], predicted, rtol=0,
                               atol=tolerance(np.float64, terms=64,
                                              scale=float(np.abs(predicted).max())))


def test_the_explicit_loop_trains_the_one_process_model(job):
    _, out, _ = job
    net, logged = cases.explicit_loop(distributed=False)
    bumped, _ = cases.explicit_loop(distributed=False, perturb=EPS)
    reference = cases.state(net)
    spread = max_difference(cases.state(bumped), reference, reference)
    first, logs = loaded(out, "explicit", 0)
    limit = weights_limit(reference, spread, len(logged))
    assert max_difference(first, reference, reference) <= limit
    np.testing.assert_allclose(logs["losses"], logged, rtol=0,
                               atol=tolerance(np.float64, terms=len(logged), scale=2.0))


def test_a_checkpoint_resumes_exactly_under_mpi(job):
    k, out, _ = job
    for rank in range(k):
        straight, _ = loaded(out, "resume_straight", rank)
        resumed, _ = loaded(out, "resume_loaded", rank)
        assert straight.keys() == resumed.keys()
        assert all(np.array_equal(straight[name], resumed[name]) for name in straight)


def test_only_rank_zero_prints_and_writes(job):
    k, out, stdout = job
    for epoch in range(1, cases.EPOCHS + 1):
        assert stdout.count(f"Epoch {epoch}/{cases.EPOCHS}") == 1, stdout
    assert sorted(p.name for p in out.glob("rank_zero.rank*")) == ["rank_zero.rank0"]
    assert sorted(p.name for p in out.glob("everyone.rank*")) == [
        f"everyone.rank{rank}" for rank in range(k)]
    assert (out / "everyone.rank1").read_text().split() == ["0", "1", "2"]


@pytest.mark.parametrize("mode", sorted(MESSAGES))
def test_an_error_on_one_rank_ends_the_job(mode):
    done = mpirun(2, python("faults.py", mode), check=False)
    assert done.returncode != 0
    assert MESSAGES[mode] in done.stderr
    assert "finished" not in done.stdout  # no rank went on past the error
