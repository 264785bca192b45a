"""Named networks: the defaults behind ``python -m handgrad train --model``."""

from .networks import MODELS, build, image_cnn, mlp, mnist1d_cnn, sequence_gru
from .resnet import RESNET1D, RESNET2D, resnet, resnet1d, resnet2d

__all__ = ["MODELS", "RESNET1D", "RESNET2D", "build", "image_cnn", "mlp", "mnist1d_cnn",
           "resnet", "resnet1d", "resnet2d", "sequence_gru"]
