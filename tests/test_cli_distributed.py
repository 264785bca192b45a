"""``python -m handgrad train --distributed`` under ``mpiexec -n 2``: the model of one
process, one run folder and one printed report (rank 0's), the test set evaluated over
the ranks, and a failing rank that ends the job instead of hanging it.

The data set is a tiny IDX directory (57 training examples after the validation split,
global batches of 15: shares of 8 and 7, and a last partial batch of 12), trained for one
epoch (4 steps of Adam) in float64. Tolerance: the processes add the same terms as one
process in another order; how far one-rounding differences travel through this training
is measured on it (one process again, from initial weights moved by one rounding step:
the spread), and a rounding difference can enter at every step, so the weights must agree
within ``steps * spread`` (at least :func:`handgrad.testing.tolerance` of the weights),
as in ``tests/test_distributed_mpi.py``. Every subprocess has a timeout; the tests that
need MPI skip when mpi4py or mpiexec is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from cli_support import assert_one_line_error, assert_usage_error, run_main, write_small
from handgrad import io as hio
from handgrad.cli import parallel
from handgrad.cli.args import UsageError
from handgrad.cli.runners import RUNNERS
from handgrad.data import load_dataset
from handgrad.testing import tolerance
from handgrad.zoo import networks
from mpi_support import TIMEOUT, mpi_env, mpirun

EPS = float(np.finfo(np.float64).eps)
TRAIN = ["train", "--model", "cnn", "--epochs", "1", "--batch-size", "15", "--dtype",
         "float64"]
STEPS = 4  # ceil(57 / 15): 64 examples less the 10% validation split (7)
RECORD_ROWS = """
import json
import sys
import handgrad.distributed as dist
from handgrad.cli.commands import main
from handgrad.model import Sequential

forward, rows = Sequential.forward, []

def recording(self, x, training=None):
    if training:
        rows.append(len(x))
    return forward(self, x, training=training)

Sequential.forward = recording
status = main(sys.argv[1:])
with open(f"rows.rank{dist.rank()}.json", "w") as f:
    json.dump(rows, f)
sys.exit(status)
"""
FAIL_ON_RANK_1 = """
import sys
import handgrad.distributed as dist
from handgrad import layers
from handgrad.cli.commands import main

backward, calls = layers.Dense.backward, []

def failing(self, *args, **kwargs):
    calls.append(1)
    if dist.rank() == 1 and len(calls) == 2:
        raise RuntimeError("rank 1 fails on purpose in its second backward")
    return backward(self, *args, **kwargs)

layers.Dense.backward = failing
sys.exit(main(sys.argv[1:]))
"""


def _alone(command, cwd):
    """``command`` run without mpiexec (as :func:`mpirun` would run it): the
    CompletedProcess, or a failed test when it runs past TIMEOUT."""
    try:
        return subprocess.run(command, cwd=cwd, env=mpi_env(), capture_output=True,
                              text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{' '.join(command)} hung for {TIMEOUT} s:\n{error.stderr}")


def _handgrad(*argv):
    return [sys.executable, "-m", "handgrad", *map(str, argv)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_small(tmp_path_factory.mktemp("data") / "data")


@pytest.fixture(scope="module")
def two(data_dir, tmp_path_factory):
    """``(working folder, CompletedProcess)`` of ``mpiexec -n 2 ... train --distributed``
    writing into the default run folder; each rank writes the sizes of the training
    batches its model saw into ``rows.rankR.json`` there."""
    cwd = tmp_path_factory.mktemp("two")
    return cwd, mpirun(2, [sys.executable, "-c", RECORD_ROWS, *TRAIN, "--distributed",
                           "--dataset", f"idx:{data_dir}"], cwd=cwd)


def _weights(folder):
    return hio.load(folder / "model.safetensors").named_parameters()


def _train_here(data_dir, out, monkeypatch=None):
    """The one-process run, in this process; with ``monkeypatch``, from initial weights
    each moved by one rounding step (relative +-eps)."""
    if monkeypatch is not None:
        build, signs = networks.build, np.random.default_rng(5)

        def bumped(*args, **kwargs):
            model = build(*args, **kwargs)
            for array in model.named_parameters().values():
                array *= 1.0 + EPS * signs.choice([-1.0, 1.0], array.shape)
            return model

        monkeypatch.setattr(networks, "build", bumped)
    code, _, err = run_main([*TRAIN, "--dataset", f"idx:{data_dir}", "--out", out,
                             "--quiet"])
    assert code == 0, err
    return _weights(out)


def test_two_processes_save_the_one_process_model(two, data_dir, tmp_path, monkeypatch):
    cwd, _ = two
    (folder,) = (cwd / "runs").iterdir()
    distributed = _weights(folder)
    reference = _train_here(data_dir, tmp_path / "one")
    bumped = _train_here(data_dir, tmp_path / "bumped", monkeypatch)
    assert distributed.keys() == reference.keys()
    spread = max(float(np.abs(reference[k] - bumped[k]).max()) for k in reference)
    scale = max(float(np.abs(v).max()) for v in reference.values())
    limit = STEPS * max(spread, tolerance(np.float64, terms=STEPS, scale=scale))
    assert {v.dtype for v in distributed.values()} == {np.dtype(np.float64)}
    assert max(float(np.abs(distributed[k] - reference[k]).max()) for k in reference) <= limit
    one = json.loads((tmp_path / "one" / "metrics.json").read_text())
    metrics = json.loads((folder / "metrics.json").read_text())
    assert (metrics["processes"], one["processes"]) == (2, 1)
    assert metrics["steps_run"] == one["steps_run"] == STEPS


def test_each_rank_trains_on_its_share_of_every_global_batch(two):
    cwd, _ = two
    shares = [json.loads((cwd / f"rows.rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [a + b for a, b in zip(*shares, strict=True)] == [15, 15, 15, 12]
    assert all(abs(a - b) <= 1 for a, b in zip(*shares))  # shares differ by one at most


def test_rank_zero_alone_makes_the_run_folder_and_prints(two, data_dir):
    cwd, done = two
    assert sorted(p.name for p in cwd.iterdir()) == ["rows.rank0.json", "rows.rank1.json",
                                                     "runs"]
    (folder,) = (cwd / "runs").iterdir()
    assert folder.name == f"idx-{data_dir.name}-cnn"  # rank 0's name, used by every rank
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["model.safetensors", "metrics.json"] + ["curve.png"] * (folder / "curve.png").exists())
    out = done.stdout
    for once in ("Model: sequential", "data-parallel on 2 processes", "Epoch 1/1",
                 "test accuracy: ", "wrote "):
        assert out.count(once) == 1, (once, out)
    assert "error" not in done.stderr.lower(), done.stderr


def test_the_test_set_is_evaluated_in_full_over_the_ranks(two, data_dir):
    cwd, _ = two
    (folder,) = (cwd / "runs").iterdir()
    metrics = json.loads((folder / "metrics.json").read_text())
    model = hio.load(folder / "model.safetensors")  # compiled: cross-entropy, accuracy
    test = load_dataset(f"idx:{data_dir}")
    expected = model.evaluate(test.x_test.astype(np.float64), test.y_test,
                              return_dict=True)
    assert abs(metrics["test_loss"] - expected["loss"]) <= tolerance(
        np.float64, terms=len(test.x_test), scale=expected["loss"])
    assert metrics["test_accuracy"] == expected["accuracy"]  # counts of the 32 examples


def test_a_rank_that_fails_while_training_ends_the_job(data_dir, tmp_path):
    done = mpirun(2, [sys.executable, "-c", FAIL_ON_RANK_1, *TRAIN, "--distributed",
                      "--dataset", f"idx:{data_dir}", "--out", tmp_path / "run"],
                  cwd=tmp_path, check=False)
    assert done.returncode != 0
    assert "rank 1 fails on purpose in its second backward" in done.stderr
    assert "[rank 1]" in done.stderr  # the message comes from the rank that failed
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_an_error_on_rank_zero_only_stops_every_rank_in_one_line(data_dir, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "model.safetensors").write_bytes(b"not ours")
    done = mpirun(2, _handgrad(*TRAIN, "--distributed", "--dataset", f"idx:{data_dir}",
                               "--out", taken), cwd=tmp_path, check=False)
    assert_one_line_error(done.returncode, done.stdout, done.stderr, "already holds",
                          "model.safetensors", "--force")
    assert "Epoch" not in done.stdout and (taken / "model.safetensors").read_bytes() == \
        b"not ours"


def test_without_mpiexec_distributed_is_a_one_process_run(data_dir, tmp_path):
    pytest.importorskip("mpi4py", reason='mpi4py is not installed (pip install -e ".[mpi]")')
    done = _alone(_handgrad(*TRAIN, "--distributed", "--dataset", f"idx:{data_dir}",
                            "--out", tmp_path / "run", "--quiet"), tmp_path)
    assert done.returncode == 0, done.stderr
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["processes"] == 1 and metrics["steps_run"] == STEPS


# ------------------------------------------------------- in this process, no MPI needed


def test_distributed_without_mpi4py_names_the_fix(data_dir, monkeypatch):
    import handgrad.distributed.comm as comm

    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py fails
    monkeypatch.setattr(comm, "_state", {"mpi": None, "comm": None})
    assert_usage_error(*run_main([*TRAIN, "--distributed", "--dataset", f"idx:{data_dir}"]),
                       "--distributed", "mpi4py", 'pip install -e ".[mpi]"')


@pytest.mark.parametrize("model", sorted(RUNNERS))
def test_the_generative_models_refuse_distributed(model):
    assert_usage_error(*run_main(["train", "--model", model, "--distributed"]),
                       "--distributed", f"--model {model}", "one process", "cnn")


def _world(monkeypatch, rank, reports):
    """Pretend to be ``rank`` of a job whose processes report ``reports``."""
    monkeypatch.setattr(parallel.dist, "rank", lambda: rank)
    monkeypatch.setattr(parallel.dist, "allgather",
                        lambda report: [report if r == rank else other
                                        for r, other in enumerate(reports)])


def _fails(message, status=2):
    def step():
        raise UsageError(message, status)
    return step


def test_an_error_on_one_rank_is_reported_by_it_alone(monkeypatch):
    _world(monkeypatch, 1, [None, None])
    with pytest.raises(UsageError, match=r"^on rank 1: no data here$"):
        parallel.everywhere(_fails("no data here"))
    _world(monkeypatch, 0, [None, ("no data here", 2)])
    with pytest.raises(SystemExit) as stopped:  # rank 0 stops without a word
        parallel.everywhere(lambda: "ready")
    assert stopped.value.code == 2


def test_the_lowest_failing_rank_reports_and_every_rank_exits_with_its_status(monkeypatch):
    _world(monkeypatch, 1, [("taken", 3), None])
    with pytest.raises(SystemExit) as stopped:
        parallel.everywhere(_fails("also broken", status=1))
    assert stopped.value.code == 3
    _world(monkeypatch, 0, [None, ("also broken", 1)])
    with pytest.raises(UsageError, match=r"^taken$") as raised:
        parallel.everywhere(_fails("taken", status=3))
    assert raised.value.status == 3
    _world(monkeypatch, 0, [None, None])
    assert parallel.everywhere(lambda: "ready") == "ready"


def test_rank_zero_alone_runs_the_step_and_every_rank_gets_its_result(monkeypatch):
    calls = []
    _world(monkeypatch, 1, [None, None])
    monkeypatch.setattr(parallel.dist, "broadcast", lambda obj, root=0: ("runs/x", True))
    assert parallel.from_rank_zero(calls.append, "made") == ("runs/x", True)
    assert calls == []  # rank 1 made nothing
