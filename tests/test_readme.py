"""README.md works as written: each ```python block runs on its own in a fresh
interpreter, and the ``python -m handgrad`` lines of the ```bash blocks parse and run
in order (training shortened to one epoch)."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cli_support import run_main
from handgrad.cli import args as _cli_args
from handgrad.cli import commands as cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def blocks(language):
    return re.findall(rf"^```{language}\n(.*?)^```", README, re.S | re.M)


def command_lines():
    """The argument lists of every ``python -m <module>`` command in the bash blocks."""
    commands = []
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():  # continued lines joined
            for part in line.split("#")[0].split("&&"):
                words = shlex.split(part)
                if words[:2] == ["python", "-m"] and words[2] != "pip":
                    commands.append(words[2:])
    return commands


def _snippet_param(index, snippet):
    trains = "fit(" in snippet or "for epoch" in snippet
    return pytest.param(index, id=f"python-{index}", marks=[pytest.mark.slow] if trains else [])


SNIPPETS = blocks("python")
HANDGRAD_LINES = [c[1:] for c in command_lines() if c[0] == "handgrad"]


def test_the_readme_has_snippets_and_commands():
    assert len(SNIPPETS) >= 3
    assert ["train"] in HANDGRAD_LINES  # the first command of the README
    assert {line[0] for line in HANDGRAD_LINES} == set(cli.COMMANDS)


@pytest.mark.parametrize("index", [_snippet_param(i, s) for i, s in enumerate(SNIPPETS)])
def test_each_python_snippet_runs_on_its_own(index, tmp_path):
    snippet = SNIPPETS[index]
    if "load_mnist1d" in snippet:
        pytest.importorskip("mnist1d")
    if "import torchvision" in snippet:  # a test-only dependency (pip install --no-deps)
        pytest.importorskip("torch")
        if importlib.util.find_spec("torchvision") is None:
            pytest.skip("torchvision is not installed")
    env = {**os.environ, "PYTHONWARNINGS": "error"}  # as strict as the test suite
    result = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr
    for name in re.findall(r'save\(model, "([^"]+)"\)', snippet):
        assert (tmp_path / name).is_file()  # files go where the snippet says


@pytest.mark.parametrize("argv", HANDGRAD_LINES, ids=" ".join)
def test_each_command_line_parses(argv):
    args = _cli_args.parser().parse_args(argv)
    cli._check_args(args)
    assert args.command == argv[0]


def test_the_other_modules_the_readme_runs_exist():
    for command in command_lines():
        if command[0] not in ("handgrad", "pytest"):
            path = ROOT / command[0].replace(".", "/")  # a package or a module
            assert (path / "__main__.py").is_file() or path.with_suffix(".py").is_file(), \
                command


@pytest.mark.slow
def test_the_command_lines_run_in_order(tmp_path, monkeypatch):
    """Every handgrad line, one after the other in one folder: later commands find the
    files of earlier ones, and no run erases another's model."""
    pytest.importorskip("mnist1d")
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    has_onnx = importlib.util.find_spec("onnx") is not None
    lines = [argv for argv in HANDGRAD_LINES  # the ONNX round trip needs the onnx package
             if has_onnx or not (argv[0] in ("export", "convert") or "--model-file" in argv)]
    models = []
    for argv in lines:
        if argv[0] == "train":
            argv = [*argv, "--epochs", "1", "--quiet"]
        code, out, err = run_main(argv)
        assert code == 0 and err == "", (argv, err)
        if argv[0] == "train":
            written = out.splitlines()[-1].removeprefix("wrote ").split(", ")[0]
            models.append(tmp_path / written)
    assert len(models) == sum(line[0] == "train" for line in lines)
    assert len(set(models)) == len(models)  # each run in its own folder
    for model in models:
        assert model.is_file(), model
