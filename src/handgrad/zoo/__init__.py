"""Named networks: the defaults behind ``python -m handgrad train --model``."""

from .networks import MODELS, build, image_cnn, mlp, mnist1d_cnn, sequence_gru
from .penalty import gradient_penalty
from .rbm import RBM
from .resnet import RESNET1D, RESNET2D, resnet, resnet1d, resnet2d
from .vae import VAE
from .wgan import WGANGP
from .word2vec import Word2Vec, neighbour_purity
from .word2vec_files import load_word2vec_format

__all__ = ["MODELS", "RBM", "RESNET1D", "RESNET2D", "VAE", "WGANGP", "Word2Vec", "build",
           "gradient_penalty", "image_cnn", "load_word2vec_format", "mlp", "mnist1d_cnn",
           "neighbour_purity", "resnet", "resnet1d", "resnet2d", "sequence_gru"]
