"""Named networks: the defaults behind ``python -m handgrad train --model``."""

from .networks import MODELS, build, image_cnn, mlp, mnist1d_cnn, sequence_gru

__all__ = ["MODELS", "build", "image_cnn", "mlp", "mnist1d_cnn", "sequence_gru"]
