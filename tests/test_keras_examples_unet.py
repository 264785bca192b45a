"""Keras's example "Image segmentation with a U-Net-like architecture" (keras.io/examples/
vision/oxford_pets_image_segmentation), its model line for line with handgrad's layers,
shrunk (16x16 images, filters [8, 16] down and [16, 8, 4] up) and trained on generated
images: noisy backgrounds holding a bright square (class 1) and a dark disk (class 2).

Keras semantics the example relies on, checked here:
- ``layers.add([x, residual])`` sums the block's output and its 1x1-convolved shortcut;
- ``MaxPooling2D(3, strides=2, padding="same")`` halves an even size, ``UpSampling2D(2)``
  doubles it, ``Conv2DTranspose(f, 3, padding="same")`` keeps it;
- the last ``Conv2D(num_classes, 3, activation="softmax")`` gives per-pixel probabilities
  and ``"sparse_categorical_crossentropy"`` (Keras's: takes probabilities) compares them
  with integer masks (N, H, W);
- ``predict`` gives (N, H, W, num_classes) and ``argmax`` on the last axis is the mask.

handgrad difference: there is no SeparableConv2D; the example's separable convolution is
written as its definition, a depthwise ``Conv2D(c, 3, groups=c)`` then a pointwise
``Conv2D(filters, 1)``. BatchNormalization's momentum is 0.9 (Keras's default 0.99 moves the
moving statistics too slowly for the 48 steps trained here, and ``predict`` uses them).
"""

from __future__ import annotations

import numpy as np

import handgrad as hg
from handgrad import layers as L
from handgrad.optimizers import Adam
from handgrad.testing import assert_close

SIZE, NUM_CLASSES = 16, 3


def separable_conv(x, filters):
    channels = x.shape[-1]
    x = L.Conv2D(channels, 3, padding="same", groups=channels, use_bias=False)(x)
    return L.Conv2D(filters, 1)(x)


def get_model(img_size, num_classes):
    inputs = hg.Input(img_size + (1,))
    x = L.Conv2D(8, 3, strides=2, padding="same")(inputs)
    x = L.BatchNormalization(momentum=0.9)(x)
    x = L.Activation("relu")(x)
    previous_block_activation = x  # set aside residual
    for filters in [16]:
        x = L.Activation("relu")(x)
        x = separable_conv(x, filters)
        x = L.BatchNormalization(momentum=0.9)(x)
        x = L.Activation("relu")(x)
        x = separable_conv(x, filters)
        x = L.BatchNormalization(momentum=0.9)(x)
        x = L.MaxPooling2D(3, strides=2, padding="same")(x)
        residual = L.Conv2D(filters, 1, strides=2, padding="same")(previous_block_activation)
        x = L.add([x, residual])  # add back residual
        previous_block_activation = x
    for filters in [16, 8]:
        x = L.Activation("relu")(x)
        x = L.Conv2DTranspose(filters, 3, padding="same")(x)
        x = L.BatchNormalization(momentum=0.9)(x)
        x = L.Activation("relu")(x)
        x = L.Conv2DTranspose(filters, 3, padding="same")(x)
        x = L.BatchNormalization(momentum=0.9)(x)
        x = L.UpSampling2D(2)(x)
        residual = L.UpSampling2D(2)(previous_block_activation)
        residual = L.Conv2D(filters, 1, padding="same")(residual)
        x = L.add([x, residual])
        previous_block_activation = x
    outputs = L.Conv2D(num_classes, 3, activation="softmax", padding="same")(x)
    return hg.Model(inputs, outputs, seed=0)


def shapes(n, seed):
    """Images (n, 16, 16, 1) and masks (n, 16, 16): a square of +1 and a disk of -1 on
    noise, each 3-6 pixels across, placed at random."""
    rng = np.random.default_rng(seed)
    images = rng.normal(0.0, 0.3, (n, SIZE, SIZE, 1)).astype(np.float32)
    masks = np.zeros((n, SIZE, SIZE), dtype=np.int64)
    rows, cols = np.mgrid[:SIZE, :SIZE]
    for i in range(n):
        side = rng.integers(3, 7)
        r, c = rng.integers(0, SIZE - side, 2)
        masks[i, r:r + side, c:c + side] = 1
        radius = rng.uniform(1.5, 3.0)
        cr, cc = rng.uniform(radius, SIZE - radius, 2)
        masks[i][(rows - cr) ** 2 + (cols - cc) ** 2 <= radius ** 2] = 2
    images[..., 0] += np.where(masks == 1, 1.0, 0.0) - np.where(masks == 2, 1.0, 0.0)
    return images, masks


def test_the_model_has_the_example_shapes():
    model = get_model((SIZE, SIZE), NUM_CLASSES)
    probabilities = model.predict(shapes(2, 0)[0])
    assert probabilities.shape == (2, SIZE, SIZE, NUM_CLASSES)
    # a sum of NUM_CLASSES float32 probabilities: one rounding per term
    assert_close(probabilities.sum(-1), np.ones((2, SIZE, SIZE)), dtype=np.float32,
                 terms=NUM_CLASSES)


def test_segmentation_reaches_the_pixel_accuracy():
    """Trained a few epochs, the argmax masks of new images are right on more than 90 %
    of the pixels, beyond the 80 % or so that predicting the background everywhere gets."""
    x_train, y_train = shapes(256, 1)
    x_val, y_val = shapes(64, 2)
    model = get_model((SIZE, SIZE), NUM_CLASSES)
    model.compile(optimizer=Adam(learning_rate=1e-2), loss="sparse_categorical_crossentropy")
    model.fit(x_train, y_train, epochs=6, batch_size=32, verbose=0, rng=0)
    predicted = np.argmax(model.predict(x_val), axis=-1)
    accuracy = np.mean(predicted == y_val)
    background = np.mean(y_val == 0)
    assert accuracy > max(0.9, background + 0.05), (accuracy, background)
