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

__all__ = ["AUC", "BinaryAccuracy", "MeanIoU", "MeanMetricWrapper", "Metric", "Precision",
           "Recall", "SparseTopKCategoricalAccuracy", "TopKCategoricalAccuracy"]
