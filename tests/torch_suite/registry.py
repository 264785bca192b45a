"""Torch row name -> handgrad adapter, merged from the family modules.

A row turns on by adding its entry to a family's ``OPS`` (``nn.functional`` rows of
``op_db``, keyed by name[.variant]) or ``MODULES`` (``module_db`` rows, keyed by class
name[.variant]); a row with no entry counts all its samples as unsupported ("no
adapter") and is listed by name in the report.
"""

from __future__ import annotations

from . import (
    activations,
    conv,
    layers,
    losses,
    misc,
    module_layers,
    modules,
    norms,
    pooling,
    recurrent,
    sampling,
    sequence,
    shape,
    transformers,
)

OPS: dict = {}
MODULES: dict = {}
for _family in (activations, conv, losses, misc, modules, module_layers, layers, norms, pooling,
                recurrent, sampling, sequence, shape, transformers):
    OPS.update(getattr(_family, "OPS", {}))
    MODULES.update(getattr(_family, "MODULES", {}))
