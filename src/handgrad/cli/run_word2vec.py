"""Placeholder: the --model runner for word2vec (being written)."""

NAME = "word2vec"
DEFAULT_DATASET = "planted"


def add_arguments(group):
    """This model's options."""


def run(args, dataset, out):
    raise NotImplementedError("word2vec is being written")
