"""Launching ``mpiexec`` from a test: where it is, the environment, a timeout.

Tests that need MPI call :func:`mpiexec` first: it skips the test, with the install
command, when mpi4py or ``mpiexec`` is missing. MPICH's ``mpiexec`` from the ``mpich``
wheel sits next to the Python executable of the virtual environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TIMEOUT = 120  # seconds for one mpiexec run: a hang fails the test, not the whole suite


def mpiexec() -> str:
    """The path of ``mpiexec``, or skip the calling test."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip('mpi4py is not installed (pip install -e ".[mpi]")')
    local = Path(sys.executable).parent / "mpiexec"
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip('mpiexec is not on the PATH (pip install -e ".[mpi]" installs MPICH\'s)')
    return found


def mpi_env() -> dict:
    """The environment for MPI processes: one BLAS thread each, and processes started
    on this machine by fork (no ssh, which containers often lack)."""
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                MKL_NUM_THREADS="1", HYDRA_LAUNCHER="fork")


def mpirun(k, command, *, cwd=None, check=True, timeout=TIMEOUT):
    """``mpiexec -n k command...`` (a list) with :func:`mpi_env`; the CompletedProcess
    (text output). A run past ``timeout`` fails the test, as does a non-zero exit with
    ``check``."""
    full = [mpiexec(), "-n", str(k), *map(str, command)]
    try:
        done = subprocess.run(full, env=mpi_env(), cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{' '.join(full)} hung for {timeout} s:\n{error.stderr}")
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(full)} failed ({done.returncode}):\n{done.stderr}")
    return done
