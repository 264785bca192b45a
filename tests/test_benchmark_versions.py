"""benchmarks/versions.py's export of an earlier revision as ``handgrad_old``: the package
imports beside ``handgrad`` and computes what this checkout computes (HEAD against the
working tree's ops; no timing)."""

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
