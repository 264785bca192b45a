"""When a forward keeps its cache, and when a model drops caches left unconsumed.

``grad`` (a forward's argument, default ``training``) says whether the cache is kept for
``backward``; the forwards a layer calls inside its own inherit it, so a container run as
``forward(x, training=False, grad=True)`` keeps every cache its backward needs. A model's
outermost forward that keeps caches first clears its whole tree's caches: forwards that
were never backpropagated do not pile up.
"""

from __future__ import annotations

import contextlib
import threading

from .._checks import describe

_FORWARD = threading.local()  # .grad: the running outermost forward's grad in this thread


def keeps_cache(owner, training, grad):
    """Whether a forward keeps its cache: ``grad`` when given (a bool); else, inside
    another layer's forward, the enclosing forward's (what its backward needs); else
    ``training``."""
    if grad is None:
        enclosing = getattr(_FORWARD, "grad", None)
        return bool(training) if enclosing is None else enclosing
    if not isinstance(grad, bool):
        raise TypeError(f"{owner}: 'grad' must be a bool or None (None: as 'training'); "
                        f"received {describe(grad)}")
    return grad


@contextlib.contextmanager
def forward_scope(layer, grad):
    """The body of ``layer``'s forward that keeps caches when ``grad``: the forwards it
    calls inherit ``grad``. An outermost one (not inside another forward) of a layer
    with ``releases_caches`` (a model) that keeps caches first clears the caches of its
    whole tree, so forwards never backpropagated do not pile up; a shared layer's
    several calls inside one forward stay paired."""
    enclosing = getattr(_FORWARD, "grad", None)
    if enclosing is None and grad and layer.releases_caches:
        layer.clear_caches()
    _FORWARD.grad = grad
    try:
        yield
    finally:
        _FORWARD.grad = enclosing
