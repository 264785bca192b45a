"""``python -m handgrad train --tensorboard``: TensorBoard logs in the run folder."""

from __future__ import annotations

import os

from .errors import UsageError

TENSORBOARD = "tensorboard"  # the run folder's subfolder of --tensorboard's event files


def check_tensorboard(args):
    """``--tensorboard``: a UsageError, before anything is trained, for word2vec (its own
    loop, no layers) or when the tensorboard package is missing."""
    if not getattr(args, "tensorboard", False):
        return
    if args.model == "word2vec":
        raise UsageError("--tensorboard logs the models that fit trains (the classifiers, "
                         "vae, wgan-gp, rbm); word2vec has a loop of its own")
    from ..training.summaries import require

    try:
        require("--tensorboard")
    except ImportError as error:
        raise UsageError(str(error)) from None


def tensorboard_callbacks(args, out, batch=None) -> list:
    """``[TensorBoard(<out>/tensorboard, write_images=True, batch=batch)]`` with
    ``--tensorboard`` (histograms and images every epoch), else ``[]``."""
    if not getattr(args, "tensorboard", False):
        return []
    from ..training import TensorBoard

    return [TensorBoard(os.path.join(out, TENSORBOARD), write_images=True, batch=batch)]
