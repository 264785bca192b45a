"""Keras's metric classes (``keras.metrics``), for ``compile(metrics=[...])``: streaming
over batches (see :mod:`.streaming` and :mod:`.auc`), and
``confusion_counts``. Pure functions of the data: the training loop and the model files
use them from below."""

from .auc import AUC
from .confusion import confusion_counts
from .streaming import (
    BinaryAccuracy,
    MeanIoU,
    MeanMetricWrapper,
    Metric,
    Precision,
    Recall,
    SparseTopKCategoricalAccuracy,
    TopKCategoricalAccuracy,
)

#: The metric classes a saved model names by class and config (``handgrad.io``); a
#: MeanMetricWrapper (it holds a callable) or a user's subclass is a custom object.
METRIC_CLASSES = {cls.__name__: cls for cls in (
    AUC, BinaryAccuracy, MeanIoU, Precision, Recall, SparseTopKCategoricalAccuracy,
    TopKCategoricalAccuracy)}

__all__ = [
    "AUC",
    "METRIC_CLASSES",
    "BinaryAccuracy",
    "MeanIoU",
    "MeanMetricWrapper",
    "Metric",
    "Precision",
    "Recall",
    "SparseTopKCategoricalAccuracy",
    "TopKCategoricalAccuracy",
    "confusion_counts",
]
