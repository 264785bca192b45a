"""The :class:`Dataset` container shared by every loader.

Inputs are channels-last ``float32`` arrays (1-D signals ``(N, L, C)``,
images ``(N, H, W, C)``); labels are ``int64`` class indices in
``[0, num_classes)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import describe, is_int


@dataclass(frozen=True, eq=False, repr=False)
class Dataset:
    """A train/test split of a classification dataset.

    ``x_train``: ``(N_train, *input_shape)``, ``y_train``: ``(N_train,)``;
    likewise ``x_test``/``y_test``, each split holding at least one example.
    ``num_classes`` is the number of classes, ``name`` a short human-readable
    identifier.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    name: str

    def __post_init__(self):
        op = "Dataset"
        if not is_int(self.num_classes) or self.num_classes < 1:
            raise ValueError(
                f"{op}: 'num_classes' must be an int >= 1; received {describe(self.num_classes)}"
            )
        if not isinstance(self.name, str):
            raise TypeError(f"{op}: 'name' must be a str; received {describe(self.name)}")
        for split in ("train", "test"):
            x = getattr(self, f"x_{split}")
            y = getattr(self, f"y_{split}")
            if not (hasattr(x, "shape") and x.ndim >= 2):
                raise ValueError(
                    f"{op}: 'x_{split}' must be an array of shape (N, *input_shape); "
                    f"received {describe(x)}"
                )
            if not (hasattr(y, "dtype") and y.ndim == 1 and np.issubdtype(y.dtype, np.integer)):
                raise ValueError(
                    f"{op}: 'y_{split}' must be a 1-D integer array of labels; "
                    f"received {describe(y)}"
                )
            if x.shape[0] != y.shape[0]:
                raise ValueError(
                    f"{op}: 'x_{split}' has {x.shape[0]} examples but 'y_{split}' has "
                    f"{y.shape[0]} labels"
                )
            if x.shape[0] == 0 or 0 in x.shape[1:]:
                raise ValueError(
                    f"{op}: 'x_{split}' must hold at least one example with at least one "
                    f"value; received {describe(x)}"
                )
            if y.size and (int(y.min()) < 0 or int(y.max()) >= self.num_classes):
                raise ValueError(
                    f"{op}: 'y_{split}' labels must lie in [0, {self.num_classes}); received "
                    f"labels from {int(y.min())} to {int(y.max())}"
                )
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ValueError(
                f"{op}: 'x_train' examples have shape {self.x_train.shape[1:]} but 'x_test' "
                f"examples have shape {self.x_test.shape[1:]}"
            )

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one example, e.g. ``(40, 1)`` or ``(28, 28, 1)``."""
        return tuple(self.x_train.shape[1:])

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, train={len(self.x_train)}, test={len(self.x_test)}, "
            f"input_shape={self.input_shape}, num_classes={self.num_classes}, "
            f"dtype={self.x_train.dtype})"
        )
