"""Offline datasets, minibatch iteration and training-batch augmentation (:mod:`.augment`).

``load_mnist1d`` and ``load_digits`` need the optional packages ``mnist1d`` and
``scikit-learn`` (``pip install "handgrad[data]"``); they are imported only when
those loaders are called. IDX files, text corpora (:mod:`.text`), batching and fitting examples to a
model's input shape (:mod:`.fit`) need nothing but NumPy.
"""

from . import augment
from .augment import augmentation, compose, gaussian_noise, random_scale, random_shift
from .batching import batches, num_batches
from .dataset import Dataset
from .fit import fit_to_input
from .idx import load_idx, read_idx, write_idx
from .labels import to_categorical
from .loaders import load_dataset, load_digits, load_mnist1d
from .text import Corpus, planted_corpus, read_text, tokenize

__all__ = [
    "Corpus",
    "Dataset",
    "augment",
    "augmentation",
    "batches",
    "compose",
    "fit_to_input",
    "gaussian_noise",
    "load_dataset",
    "load_digits",
    "load_idx",
    "load_mnist1d",
    "num_batches",
    "planted_corpus",
    "random_scale",
    "random_shift",
    "read_idx",
    "read_text",
    "to_categorical",
    "tokenize",
    "write_idx",
]
