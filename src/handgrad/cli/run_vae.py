"""Placeholder: the --model runner for vae (being written)."""

NAME = "vae"
DEFAULT_DATASET = "digits"


def add_arguments(group):
    """This model's options."""


def run(args, dataset, out):
    raise NotImplementedError("vae is being written")
