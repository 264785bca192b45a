"""Offline datasets: MNIST-1D (generated locally), scikit-learn's digits, IDX.

Nothing here downloads anything. The optional packages (``mnist1d``,
``scikit-learn``) are imported inside the loaders, so ``import handgrad.data``
works without them; install them with ``pip install "handgrad[data]"``.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import random
import threading
import time

import numpy as np

from .._checks import as_generator, describe, is_int
from .dataset import Dataset
from .idx import load_idx
from .text import Corpus, planted_corpus, read_text

_DATASETS = ("mnist1d", "digits", "idx:PATH", "text:PATH", "planted")
_GLOBAL_RNG_LOCK = threading.Lock()  # MNIST-1D generation reseeds the global generators
_VERBOSE = contextvars.ContextVar("handgrad_data_verbose", default=False)


def _require(op: str, module: str, package: str):
    """Import an optional dependency, or explain how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{op} needs the optional package {package!r}, which could not be imported "
            f'({error}); install it with: pip install "handgrad[data]"'
        ) from error


def _check_verbose(op: str, verbose) -> None:
    if not isinstance(verbose, (bool, np.bool_)):
        raise TypeError(f"{op}: 'verbose' must be a bool; received {describe(verbose)}")


@functools.lru_cache(maxsize=4)
def _generate_mnist1d(seed: int):
    """The MNIST-1D arrays for ``seed``, generated once per process (read-only).
    Says what it does when the caller asked for ``verbose``."""
    mnist1d_data = _require("load_mnist1d", "mnist1d.data", "mnist1d")
    args = mnist1d_data.get_dataset_args()
    args.seed = seed
    verbose, start = _VERBOSE.get(), time.perf_counter()
    if verbose:
        print(f"generating MNIST-1D (seed {seed}, takes a few seconds)... ", end="", flush=True)
    # make_dataset seeds and draws from NumPy's and Python's global generators:
    # restore both so the caller's random state is left exactly as it was.
    with _GLOBAL_RNG_LOCK:
        numpy_state = np.random.get_state()  # noqa: NPY002 (saved, never drawn from)
        python_state = random.getstate()
        try:
            data = mnist1d_data.make_dataset(args)
        finally:
            np.random.set_state(numpy_state)  # noqa: NPY002
            random.setstate(python_state)
    arrays = (
        np.asarray(data["x"], dtype=np.float32)[..., None],
        np.asarray(data["y"], dtype=np.int64),
        np.asarray(data["x_test"], dtype=np.float32)[..., None],
        np.asarray(data["y_test"], dtype=np.int64),
    )
    for array in arrays:
        array.flags.writeable = False
    if verbose:
        print(f"{len(arrays[0])} train / {len(arrays[2])} test examples in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    return arrays


def load_mnist1d(seed: int | None = None, verbose: bool = False) -> Dataset:
    """MNIST-1D (Greydanus, 2020), generated locally with the ``mnist1d`` package.

    Uses the paper's default arguments (5000 signals, 4000 train / 1000 test,
    length 40, 10 classes); ``seed=None`` means the package's default seed, so
    the result is the standard dataset. Returns ``x``: ``(N, 40, 1)`` float32
    (standardized by the generator), ``y``: ``(N,)`` int64. Generation takes a
    few seconds and is cached per seed; each call returns fresh copies;
    ``verbose=True`` prints a line while generating. The global NumPy and
    Python random states are left unchanged.
    """
    op = "load_mnist1d"
    if seed is not None and not (is_int(seed) and 0 <= seed < 2**32):
        raise ValueError(
            f"{op}: 'seed' must be None or an int in [0, 2**32); received {describe(seed)}"
        )
    _check_verbose(op, verbose)
    mnist1d_data = _require(op, "mnist1d.data", "mnist1d")
    if seed is None:
        seed = mnist1d_data.get_dataset_args().seed
    token = _VERBOSE.set(bool(verbose))
    try:
        arrays = _generate_mnist1d(int(seed))
    finally:
        _VERBOSE.reset(token)
    x_train, y_train, x_test, y_test = (a.copy() for a in arrays)
    return Dataset(x_train, y_train, x_test, y_test, num_classes=10, name="mnist1d")


def _stratified_split(labels: np.ndarray, test_fraction: float, generator):
    """Sorted index arrays ``(train, test)``: for each class with ``n_c``
    examples, ``round(test_fraction * n_c)`` of them, clamped to
    ``[1, n_c - 1]``, drawn at random by ``generator`` go to the test set."""
    test_parts = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        n_test = min(max(round(test_fraction * len(members)), 1), len(members) - 1)
        test_parts.append(generator.permutation(members)[:n_test])
    test = np.sort(np.concatenate(test_parts))
    train = np.setdiff1d(np.arange(len(labels)), test)
    return train, test


def load_digits(test_fraction: float = 0.2, seed=0) -> Dataset:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes).

    A stratified split: each class sends ``round(test_fraction * n_c)`` of its
    ``n_c`` examples (at least 1, at most ``n_c - 1``) to the test set, chosen
    by a NumPy Generator from ``seed`` (an int, a Generator, or None for a
    fresh random split); the same int seed always gives the same split, and
    both sets keep the original example order. Returns ``x``: ``(N, 8, 8, 1)``
    float32 in ``[0, 1]`` (pixel values 0..16 divided by 16), ``y``: ``(N,)``
    int64.
    """
    op = "load_digits"
    if isinstance(test_fraction, (bool, np.bool_)) or not isinstance(
        test_fraction, (int, float, np.integer, np.floating)
    ):
        raise TypeError(
            f"{op}: 'test_fraction' must be a float in (0, 1); received {describe(test_fraction)}"
        )
    if not 0 < test_fraction < 1:
        raise ValueError(
            f"{op}: 'test_fraction' must be a float in (0, 1); received {test_fraction!r}"
        )
    generator = as_generator(op, "seed", seed)
    sklearn_datasets = _require(op, "sklearn.datasets", "scikit-learn")
    bunch = sklearn_datasets.load_digits()
    images = np.asarray(bunch.images, dtype=np.float32)[..., None] / np.float32(16)
    labels = np.asarray(bunch.target, dtype=np.int64)
    train, test = _stratified_split(labels, float(test_fraction), generator)
    return Dataset(
        images[train], labels[train], images[test], labels[test], num_classes=10, name="digits"
    )


def load_dataset(spec: str, verbose: bool = False) -> Dataset | Corpus:
    """A dataset by name: ``"mnist1d"``, ``"digits"`` or ``"idx:PATH"`` (a
    directory of MNIST-style IDX files, see :func:`~handgrad.data.load_idx`); or a
    text :class:`~handgrad.data.Corpus`: ``"text:PATH"`` (a UTF-8 text file, see
    :func:`~handgrad.data.read_text`) or ``"planted"`` (the generated corpus of
    :func:`~handgrad.data.planted_corpus`, seed 0). ``verbose=True`` says what
    happens during MNIST-1D's generation."""
    op = "load_dataset"
    valid = ", ".join(repr(s) for s in _DATASETS)
    if not isinstance(spec, str):
        raise TypeError(f"{op}: 'spec' must be a str, one of {valid}; received {describe(spec)}")
    _check_verbose(op, verbose)
    if spec == "mnist1d":
        return load_mnist1d(verbose=verbose)
    if spec == "digits":
        return load_digits()
    if spec.startswith("idx:"):
        path = spec[len("idx:") :]
        if not path:
            raise ValueError(f"{op}: 'spec' {spec!r} names no directory; use 'idx:PATH'")
        return load_idx(path)
    if spec.startswith("text:"):
        path = spec[len("text:") :]
        if not path:
            raise ValueError(f"{op}: 'spec' {spec!r} names no file; use 'text:PATH'")
        return read_text(path)
    if spec == "planted":
        return planted_corpus()
    raise ValueError(f"{op}: 'spec' must be one of {valid}; received {spec!r}")
