"""A torchvision ResNet-18 converted by ``convert_torch`` fine-tunes with ``fit`` on the
built-in digits fitted to its 32x32 RGB input (``fit_to_input``: each pixel 4x4, gray in
the three channels): the loss falls, and a checkpoint saved after an epoch resumes
exactly (one more epoch from the file equals one more epoch of the original)."""

from __future__ import annotations

import numpy as np
import pytest

from handgrad import io as hio
from handgrad import optimizers
from handgrad.data import fit_to_input
from torchvision_support import torch_model

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")  # the digits dataset

EXAMPLES, BATCH = 128, 32  # a small subset of digits: four steps an epoch


@pytest.fixture(scope="module")
def digits():
    """``(x, y)``: the first EXAMPLES training digits as (N, 32, 32, 3) float32."""
    from handgrad.data import load_digits
    data = load_digits()
    return fit_to_input(data.x_train[:EXAMPLES], (32, 32, 3)), data.y_train[:EXAMPLES]


def resnet18():
    """torchvision's ResNet-18 with ten classes, converted in float32 and compiled."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a shared, busy machine torch's threads spin-wait
    try:
        net, x = torch_model("resnet18", torch.float32, ({"num_classes": 10}, (2, 3, 32, 32)))
        model = hio.convert_torch(net, x)
    finally:
        torch.set_num_threads(threads)
    model.compile(optimizers.Adam(lr=1e-3), "cross_entropy", ["accuracy"])
    return model


def test_a_converted_resnet18_fine_tunes_and_resumes_exactly(digits, tmp_path):
    x, y = digits
    model = resnet18()
    assert model.input_shape == (32, 32, 3)
    before = model.evaluate(x, y, return_dict=True)["loss"]
    rng = np.random.default_rng(0)
    first = model.fit(x, y, epochs=2, batch_size=BATCH, rng=rng, verbose=0).history["loss"]
    path = tmp_path / "resnet18.safetensors"
    hio.save_checkpoint(path, model, model.optimizer, epoch=2, rng=rng)
    more = model.fit(x, y, epochs=3, initial_epoch=2, batch_size=BATCH, rng=rng,
                     verbose=0).history["loss"]
    after = model.evaluate(x, y, return_dict=True)["loss"]
    assert more[0] < first[0] and after < before, (before, first, more, after)

    checkpoint = hio.load_checkpoint(path)
    resumed = checkpoint.model
    assert checkpoint.epoch == 2
    again = resumed.fit(x, y, epochs=3, initial_epoch=checkpoint.epoch, batch_size=BATCH,
                        rng=checkpoint.rng, verbose=0).history["loss"]
    assert again == more
    for ours, theirs in [(model.named_parameters(), resumed.named_parameters()),
                         (model.named_buffers(), resumed.named_buffers()),
                         (model.optimizer.state_dict(), resumed.optimizer.state_dict())]:
        assert ours.keys() == theirs.keys()
        for key in ours:
            np.testing.assert_array_equal(theirs[key], ours[key], err_msg=key)
    # torch's names survive the file: layer1.0.conv1 is still there, trained
    assert "layer1.0.conv1.W" in resumed.named_parameters()
