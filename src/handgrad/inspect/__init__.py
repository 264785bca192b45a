"""Looking inside a model: the summary and receptive fields (:mod:`.summary`), figures
(:mod:`.plots`, matplotlib), probes that run it (:mod:`.probes`) and NaN/inf detection
(:mod:`.anomaly`)."""

from .anomaly import AnomalyError, detect_anomaly
from .probes import gradient_probe, save_pictures
from .summary import (
    ReceptiveField,
    conv_layers,
    format_bytes,
    next_field,
    parameter_bytes,
    receptive_fields,
    summary_table,
)

__all__ = [
    "AnomalyError", "ReceptiveField", "conv_layers", "detect_anomaly", "format_bytes",
    "gradient_probe", "next_field", "parameter_bytes", "receptive_fields", "save_pictures",
    "summary_table",
]
