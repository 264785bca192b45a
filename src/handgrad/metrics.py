"""Keras's metric classes (``keras.metrics``), for ``compile(metrics=[...])``: streaming
over batches (see :mod:`handgrad.training.streaming` and :mod:`handgrad.training.auc`)."""

from .training.auc import AUC
from .training.streaming import (
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
]
