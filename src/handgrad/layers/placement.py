"""A layer's device: ``Layer.to("cuda")`` / ``.to("cpu")`` and the ``device=`` argument
every layer constructor takes (see :mod:`handgrad._device`)."""

from __future__ import annotations

from .._device import check_device, device_of, to_device


class Placement:
    """The ``device`` of a layer tree ("cpu" or "cuda") and moving it."""

    #: where the parameters, gradients, buffers and caches live; set by :meth:`to`
    device = "cpu"

    def to(self, device):
        """Move every parameter, gradient and buffer of this layer and its children (and a
        compiled model's optimizer state) to ``device`` ("cpu" or "cuda"); pending caches
        are dropped. Arrays shared by two layers (tied weights) stay shared. Returns self;
        a layer not built yet builds its parameters there."""
        device = check_device(f"{self.label}.to", device)
        moved = {}  # id of an array -> its copy, so that tied arrays stay one array

        def move(array):
            if id(array) not in moved:
                moved[id(array)] = (array, to_device(array, device))
            return moved[id(array)][1]

        for _, layer in self.walk():
            layer.device = device
            for store in (layer.parameters, layer.gradients, layer.buffers):
                for key, value in list(store.items()):
                    store[key] = move(value)
            layer._caches.clear()
        optimizer = getattr(self, "optimizer", None)
        if hasattr(optimizer, "to"):
            optimizer.to(device)
        return self

    def cuda(self):
        """``to("cuda")``."""
        return self.to("cuda")

    def cpu(self):
        """``to("cpu")``."""
        return self.to("cpu")

    def check_device(self, x, arg="x"):
        """Refuse an input on another device than the layer's parameters."""
        if self.parameters and device_of(x) != self.device:
            raise ValueError(f"{self.label}: '{arg}' is on {device_of(x)} but the layer's "
                             f"parameters are on {self.device}; move the input "
                             f"(handgrad.to_device(x, '{self.device}')) or the layer "
                             f"(layer.to('{device_of(x)}'))")
