"""The runners of the non-classifier models (see :mod:`handgrad.cli.generative`)."""

from __future__ import annotations

from . import run_rbm, run_vae, run_wgan, run_word2vec

RUNNERS = {runner.NAME: runner for runner in (run_vae, run_wgan, run_word2vec, run_rbm)}


def add_arguments(parser):
    """Each runner's options, in a group of its own."""
    for name, runner in RUNNERS.items():
        runner.add_arguments(parser.add_argument_group(f"options of --model {name}"))
