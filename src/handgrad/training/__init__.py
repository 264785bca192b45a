"""Training: the fit loop (:mod:`.loop`), callbacks, metrics and the progress bar."""

from ..metrics import confusion_counts
from .backup import BackupAndRestore
from .callbacks import (
    Callback,
    EarlyStopping,
    GradientNormLogger,
    History,
    LearningRateScheduler,
    ModelCheckpoint,
    TerminateOnNaN,
)
from .keras_callbacks import CSVLogger, LambdaCallback
from .king import KingScheduler
from .loop import NonFiniteLossError, TrainingMixin
from .plateau import ReduceLROnPlateau
from .progress import ProgbarLogger
from .sparse_evolution import SparseEvolutionCallback
from .tensorboard import TensorBoard

__all__ = [
    "BackupAndRestore", "CSVLogger", "Callback", "EarlyStopping", "GradientNormLogger",
    "History", "KingScheduler", "LambdaCallback", "LearningRateScheduler", "ModelCheckpoint",
    "NonFiniteLossError", "ProgbarLogger", "ReduceLROnPlateau", "SparseEvolutionCallback",
    "TensorBoard", "TerminateOnNaN", "TrainingMixin", "confusion_counts",
]
