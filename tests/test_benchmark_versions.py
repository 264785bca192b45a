"""benchmarks/versions.py's export of an earlier revision as ``handgrad_old``: the package
imports beside ``handgrad`` and computes what this checkout computes (HEAD against the
working tree's ops), and the old runner of every kind of case runs the old package on
the new runner's inputs (no timing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.append(ROOT)


def _git_checkout():
    if shutil.which("git") is None:
        return False
    done = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True)
    return done.returncode == 0


@pytest.mark.skipif(not _git_checkout(), reason="needs git and a git checkout")
def test_an_exported_revision_imports_beside_handgrad_and_agrees(tmp_path):
    pytest.importorskip("torch")
    from benchmarks.versions import export_old

    package = export_old("HEAD", ROOT, str(tmp_path))
    with open(os.path.join(package, "ops", "__init__.py")) as f:
        assert "from handgrad." not in f.read()
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import numpy as np, handgrad_old.ops as old, handgrad.ops as new\n"
        "assert old.conv2d is not new.conv2d\n"
        "x = np.random.default_rng(0).standard_normal((2, 6, 6, 3))\n"
        "w = np.random.default_rng(1).standard_normal((3, 3, 3, 4))\n"
        "a, b = old.conv2d(x, w, None, padding=1)[0], new.conv2d(x, w, None, padding=1)[0]\n"
        "assert np.abs(a - b).max() <= 1e-12 * np.abs(b).max(), np.abs(a - b).max()\n"
        "print('ok')\n")
    env = {**os.environ, "HANDGRAD_NUMBA": "0"}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


RUNNERS_SCRIPT = """
import sys; sys.path.insert(0, sys.argv[1])
import numpy as np
from benchmarks import breadth, cases, resnet, versions
picked = [c for c in cases.CASES if c.name.split()[0] in ("1", "8b")]
picked += [c for c in breadth.BREADTH_CASES if c.name.split()[0] in ("14b", "18", "19")]
picked += [c for c in resnet.MODEL_CASES if c.skip_reason() is None]
def flat(result):
    if isinstance(result, (tuple, list)):
        return [a for part in result for a in flat(part)]
    return [] if result is None else [np.asarray(result)]
def package_of(runner):
    for name in ("model", "layer"):  # the ResNet-18 step's, the encoder layer's
        if hasattr(runner, name):
            return type(getattr(runner, name)).__module__
    return runner.backward.__module__  # an op's
for case in picked:
    dtype = getattr(case, "dtypes", (np.float64,))[0]
    old, new, theirs = versions.runners(case, dtype, quick=True)
    assert package_of(old).startswith("handgrad_old."), (case.name, package_of(old))
    assert package_of(new).startswith("handgrad."), (case.name, package_of(new))
    a, b = flat(old()), flat(new())  # one forward + backward (the step: its loss)
    assert len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b)), case.name
    theirs()
print(len(picked))
"""


@pytest.mark.skipif(not _git_checkout(), reason="needs git and a git checkout")
def test_the_old_runner_of_each_kind_of_case_runs_the_old_package(tmp_path):
    """A convolution, a pooling, a breadth map, RMSNorm, the encoder layer and (with
    torchvision) the ResNet-18 step: HEAD's package exported gives the same results as
    the working tree's on the same inputs, through runners built from it."""
    pytest.importorskip("torch")
    from benchmarks.versions import export_old

    export_old("HEAD", ROOT, str(tmp_path))
    env = {**os.environ, "HANDGRAD_NUMBA": "0", "PYTHONPATH": os.pathsep.join(
        [ROOT, os.path.join(ROOT, "src"), os.path.join(ROOT, "tests"),
         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", RUNNERS_SCRIPT, str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) >= 5
