"""Per-layer hooks and the data-parallel communicator, as public registrations.

``layer.register_forward_hook(fn)`` calls ``fn(layer, x, y)`` after each forward of that
layer and ``layer.register_backward_hook(fn)`` calls ``fn(layer, dy, dx)`` after each
backward (parameter gradients already added into ``layer.gradients``); both return a
:class:`HookHandle` whose ``remove()`` unregisters (it is also a context manager). ``x``
and ``dy`` are the first argument as the caller passed it (a list or a dict for a graph
``Model``, a list for a merge layer), ``y`` and ``dx`` what the method returned (``dx``
None for a backward with ``input_grad=False``). Hooks
observe: one returning anything but None is a TypeError. They run in registration order.

Every ``forward`` and ``backward`` of a :class:`Hooked` subclass is wrapped when the
class is made (:func:`observed`), so a layer that overrides them (recurrent, attention,
a container, a user's layer) calls its hooks too, once per call: a forward that calls
another forward of the same instance (``super().forward``) does not call them again.
A hook on a container sees the container's input and output; its children's hooks see
theirs. A layer with no hook pays one dictionary lookup per call.

Everything is per instance: nothing global, so two models (or a model and its deep
copy) in two threads never see each other's hooks. A copy (``copy.deepcopy``, pickle)
starts without hooks or communicators: they observe the instance they were given to.

A layer whose training forward needs the whole global batch in data-parallel training
declares ``needs_communicator = True`` (``Dropout``: the mask's rows; ``BatchNorm``: the
statistics) and reads :attr:`Hooked.communicator`, which
:class:`handgrad.distributed.GradientReducer` registers with
:meth:`Hooked.register_communicator` while it is open and removes when it closes (the
layer never imports ``distributed``).
"""

from __future__ import annotations

import functools
import inspect
import threading

from .._checks import describe

_PER_INSTANCE = ("_forward_hooks", "_backward_hooks", "_communicators", "_hooks_running")


class HookHandle:
    """What a registration returns: :meth:`remove` unregisters (again: nothing happens);
    ``with layer.register_forward_hook(fn): ...`` removes it when the block ends."""

    def __init__(self, registry, value):
        self._registry = registry
        registry[self] = value

    def remove(self):
        self._registry.pop(self, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def observed(method, kind):
    """``method`` (a ``forward`` or ``backward``) calling the instance's ``kind`` hooks
    with its first argument and its result, at the outermost such call on the instance
    in this thread."""
    names = list(inspect.signature(method).parameters)
    first = names[1] if len(names) > 1 else None
    registry = f"_{kind}_hooks"

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        hooks = self.__dict__.get(registry)
        if not hooks:
            return method(self, *args, **kwargs)
        running = self.__dict__.setdefault("_hooks_running", set())
        key = (kind, threading.get_ident())
        if key in running:  # a forward inside this instance's own forward
            return method(self, *args, **kwargs)
        running.add(key)
        try:
            result = method(self, *args, **kwargs)
        finally:
            running.discard(key)
        given = args[0] if args else kwargs.get(first)
        for hook in tuple(hooks.values()):
            returned = hook(self, given, result)
            if returned is not None:
                raise TypeError(f"{self.label}: a {kind} hook must return None (hooks "
                                f"observe; to change values write a layer); {hook!r} "
                                f"returned {describe(returned)}")
        return result

    run.observed = True
    return run


class Hooked:
    """The hook and communicator registrations of a layer (the base of ``Layer``); see
    the module docstring."""

    #: True for a layer whose training forward needs the global batch in data-parallel
    #: training; it then reads :attr:`communicator` (see the module docstring).
    needs_communicator = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for kind in ("forward", "backward"):
            method = getattr(cls, kind, None)
            if callable(method) and not getattr(method, "observed", False):
                setattr(cls, kind, observed(method, kind))

    def _registry(self, name):
        return self.__dict__.setdefault(name, {})

    def _check_hook(self, method, fn):
        if not callable(fn):
            raise TypeError(f"{self.label}.{method}: 'fn' must be callable; received "
                            f"{describe(fn)}")

    def register_forward_hook(self, fn) -> HookHandle:
        """Call ``fn(layer, x, y)`` after each forward of this layer (``x`` the input as
        passed, ``y`` the output); returns a :class:`HookHandle`."""
        self._check_hook("register_forward_hook", fn)
        return HookHandle(self._registry("_forward_hooks"), fn)

    def register_backward_hook(self, fn) -> HookHandle:
        """Call ``fn(layer, dy, dx)`` after each backward of this layer (``dy`` the output
        gradient as passed, ``dx`` the input gradient returned; the call's parameter
        gradients are already in ``layer.gradients``); returns a :class:`HookHandle`."""
        self._check_hook("register_backward_hook", fn)
        return HookHandle(self._registry("_backward_hooks"), fn)

    def register_communicator(self, communicator) -> HookHandle:
        """Give a layer that :attr:`needs_communicator` the object through which it sees
        the global batch: ``allreduce(array)`` (the sum over processes, a new array) and
        ``rows`` (``(start, total)``: this process's rows of the global batch). The latest
        registration not removed is :attr:`communicator`."""
        if not self.needs_communicator:
            raise TypeError(f"{self.label} takes no communicator: its forward does not "
                            f"depend on the global batch (needs_communicator is False)")
        if not callable(getattr(communicator, "allreduce", None)) or \
                "rows" not in dir(communicator):
            raise TypeError(f"{self.label}.register_communicator: 'communicator' must "
                            f"have an allreduce(array) method and a rows attribute; "
                            f"received {describe(communicator)}")
        return HookHandle(self._registry("_communicators"), communicator)

    @property
    def communicator(self):
        """The communicator registered last and not removed, or None (one process)."""
        registered = tuple(self.__dict__.get("_communicators", {}).values())
        return registered[-1] if registered else None

    def __getstate__(self):
        """The instance's state without its registrations (a copy starts without)."""
        return {key: value for key, value in self.__dict__.items()
                if key not in _PER_INSTANCE}
