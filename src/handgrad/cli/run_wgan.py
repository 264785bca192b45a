"""Placeholder: the --model runner for wgan (being written)."""

NAME = "wgan-gp"
DEFAULT_DATASET = "digits"


def add_arguments(group):
    """This model's options."""


def run(args, dataset, out):
    raise NotImplementedError("wgan is being written")
