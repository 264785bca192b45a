"""Placeholder: the --model runner for rbm (being written)."""

NAME = "rbm"
DEFAULT_DATASET = "digits"


def add_arguments(group):
    """This model's options."""


def run(args, dataset, out):
    raise NotImplementedError("rbm is being written")
