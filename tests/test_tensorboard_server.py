"""``python -m handgrad train --tensorboard`` writes runs/<name>/tensorboard, and a
``tensorboard --logdir`` server started on the runs folder serves handgrad's scalars and
histograms over HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from cli_support import assert_one_line_error, run_main

pytest.importorskip("tensorboard")

SERVER_SECONDS = 120  # the server's start, first load and answers, on a loaded machine


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """One short CLI run with --tensorboard: (the runs folder, the run's metrics)."""
    runs = tmp_path_factory.mktemp("runs")
    code, out, err = run_main(["train", "--model", "mlp", "--epochs", "2", "--tensorboard",
                               "--out", runs / "mnist1d-mlp", "--quiet"])
    assert code == 0, (out, err)
    metrics = json.loads((runs / "mnist1d-mlp" / "metrics.json").read_text())
    return runs, metrics


def test_train_writes_the_logs_into_the_run_folder(run_folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs, metrics = run_folder
    accumulator = EventAccumulator(str(runs / "mnist1d-mlp" / "tensorboard" / "train"))
    accumulator.Reload()
    tags = accumulator.Tags()
    assert {"epoch_loss", "epoch_accuracy", "epoch_lr", "gradient_norm/dense_1"} <= \
        set(tags["tensors"])
    assert "parameters/dense_1.W" in tags["histograms"]
    assert "outputs/dense_5" in tags["histograms"]
    assert (runs / "mnist1d-mlp" / "tensorboard" / "validation").is_dir()
    assert len(metrics["history"]["loss"]) == 2


def test_train_refuses_tensorboard_without_the_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
    code, out, err = run_main(["train", "--model", "mlp", "--epochs", "1", "--tensorboard",
                               "--out", tmp_path / "run", "--quiet"])
    assert_one_line_error(code, out, err, "--tensorboard", 'pip install "handgrad[tensorboard]"')
    assert not (tmp_path / "run").exists()  # refused before the run folder was made


def test_train_refuses_tensorboard_for_word2vec(tmp_path):
    code, out, err = run_main(["train", "--model", "word2vec", "--tensorboard", "--out",
                               tmp_path / "run", "--quiet"])
    assert_one_line_error(code, out, err, "--tensorboard", "word2vec")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(port, path, **query):
    url = f"http://127.0.0.1:{port}{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_for_run(server, port, run, deadline):
    """The scalars tags once the server has loaded ``run`` (it loads in the background)."""
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"tensorboard exited with status {server.returncode}")
        try:
            tags = get(port, "/data/plugin/scalars/tags")
            if run in tags:
                return tags
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    pytest.fail(f"tensorboard did not serve the run {run!r} within {SERVER_SECONDS}s")


def test_a_tensorboard_server_serves_the_scalars_and_histograms(run_folder):
    runs, metrics = run_folder
    port, run = free_port(), "mnist1d-mlp/tensorboard/train"
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(runs), "--host",
         "127.0.0.1", "--port", str(port), "--load_fast", "false", "--reload_interval", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        tags = wait_for_run(server, port, run, time.monotonic() + SERVER_SECONDS)
        assert {"epoch_loss", "epoch_lr", "gradient_norm/dense_1"} <= set(tags[run])
        loss = get(port, "/data/plugin/scalars/scalars", run=run, tag="epoch_loss")
        assert [(step, value) for _, step, value in loss] == \
            list(enumerate(metrics["history"]["loss"]))  # float64 logs: exact
        validation = get(port, "/data/plugin/scalars/scalars",
                         run="mnist1d-mlp/tensorboard/validation", tag="epoch_accuracy")
        assert [value for _, _, value in validation] == metrics["history"]["val_accuracy"]
        histograms = get(port, "/data/plugin/histograms/tags")[run]
        assert {"parameters/dense_1.W", "gradients/dense_1.W", "outputs/dense_1"} <= \
            set(histograms)
        events = get(port, "/data/plugin/histograms/histograms", run=run,
                     tag="parameters/dense_5.b")
        assert [step for _, step, _ in events] == [0, 1]
        counts = [sum(bucket[2] for bucket in buckets) for _, _, buckets in events]
        assert np.allclose(counts, 10)  # the 10 biases of the output layer
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
