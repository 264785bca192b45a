"""Training: the fit loop (:mod:`.loop`), callbacks, metrics and the progress bar."""

from .callbacks import (
    Callback,
    EarlyStopping,
    GradientNormLogger,
    History,
    LearningRateScheduler,
    ModelCheckpoint,
    TerminateOnNaN,
)
from .king import KingScheduler
from .loop import NonFiniteLossError, TrainingMixin
from .metrics import confusion_counts
from .plateau import ReduceLROnPlateau
from .sparse_evolution import SparseEvolutionCallback

__all__ = [
    "Callback", "EarlyStopping", "GradientNormLogger", "History", "KingScheduler",
    "LearningRateScheduler", "ModelCheckpoint", "NonFiniteLossError", "ReduceLROnPlateau",
    "SparseEvolutionCallback", "TerminateOnNaN", "TrainingMixin", "confusion_counts",
]
