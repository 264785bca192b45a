"""Messages for constructor calls spelled the PyTorch way.

PyTorch's layers take the input size first (``nn.Linear(16, 32)``,
``nn.BatchNorm2d(16)``, ``nn.Conv2d(3, 16, 3)``); handgrad's, like Keras's, take the
output size only and read the input size from the data at build.
"""

from __future__ import annotations

from .._checks import is_int

RULE = "handgrad takes the output size only (the input size comes from the data)"


def torch_spelling(owner, received, torch_call, handgrad_call) -> str:
    """The message for a call that reads like PyTorch's ``torch_call``: what was received,
    the rule, and the handgrad spelling ``handgrad_call``."""
    return (f"{owner}: {received}; this reads like PyTorch's {torch_call}, but {RULE}: "
            f"write {handgrad_call}")


def refuse_count(owner, name, value, position, torch_call, handgrad_call):
    """Raise :func:`torch_spelling`'s ValueError when ``name``, a fraction in handgrad's
    order, received an int > 1: a channel count at its place in PyTorch's order
    (``position``: "first", "second")."""
    if is_int(value) and value > 1:
        raise ValueError(torch_spelling(
            owner, f"received {name}={value!r} (the {position} argument)", torch_call,
            handgrad_call))
