"""The penalties of the layers' regularizers in a training or test step
(:mod:`handgrad.regularizers`).

Each step: :func:`reset` before the forward, :func:`penalty` after it (the trainable
layers' weight penalties plus the activity penalties of that forward), added to the
logged ``loss`` as Keras does, in training and in evaluation; :func:`add_gradients` adds
each penalized parameter's gradient ``l1 sign(w) + 2 l2 w`` after the backward pass (and
after the data-parallel gradient sum), just before the optimizer step. The activity
penalties' gradients enter the layers' ``dy`` in their own backward.
"""

from __future__ import annotations


def _layers(model):
    return [layer for _, layer in model.walk()
            if getattr(layer, "parameter_regularizers", None) is not None]


def has_activity(model) -> bool:
    """Whether some layer of ``model`` has an ``activity_regularizer``."""
    return any(layer.activity_regularizer is not None for layer in _layers(model))


def reset(model):
    """Zero the activity penalties of ``model``'s layers (before a step's forward)."""
    for layer in _layers(model):
        layer.activity_penalty = 0.0


def penalty(model) -> float:
    """The weight penalties of the trainable layers plus the activity penalties of the
    forwards since :func:`reset`."""
    total = 0.0
    for layer in _layers(model):
        total += layer.activity_penalty
        if layer.trainable:
            total += sum(reg(layer.parameters[key])
                         for key, reg in layer.parameter_regularizers.items())
    return total


def add_gradients(model):
    """Add each penalized trainable parameter's penalty gradient to its gradient."""
    for layer in _layers(model):
        if layer.trainable:
            for key, reg in layer.parameter_regularizers.items():
                layer.gradients[key] += reg.gradient(layer.parameters[key])
