"""Checking numbers: tolerances from the dtype and the case, finite differences and
``gradcheck`` (:mod:`.numeric`), and the table of random layer cases
(:mod:`.layer_cases`) behind ``python -m handgrad gradcheck``."""

from .keras_cases import NON_FLOAT_LAYERS
from .layer_cases import INTEGER_INPUT_CASES, LAYER_CASES, MULTI_INPUT_LAYERS, describe_layer
from .numeric import (
    FD_FACTOR,
    GradcheckResult,
    assert_close,
    assert_gradient_close,
    finite_max,
    gradcheck,
    max_abs_error,
    numeric_gradient,
    tolerance,
)

__all__ = [
    "FD_FACTOR", "INTEGER_INPUT_CASES", "LAYER_CASES", "MULTI_INPUT_LAYERS", "NON_FLOAT_LAYERS",
    "GradcheckResult",
    "assert_close", "assert_gradient_close", "describe_layer", "finite_max", "gradcheck",
    "max_abs_error", "numeric_gradient", "tolerance",
]
