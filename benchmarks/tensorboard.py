"""What logging every epoch to TensorBoard costs on the default MNIST-1D run:
``python -m benchmarks.tensorboard [--rounds N]``.

The model, data and options of ``python -m handgrad train`` (resnet on MNIST-1D, AdamW,
label smoothing, augmentation, 10% validation, batch 64, one BLAS thread) train in this
process one epoch per ``fit``, alternately without and with the callback that
``--tensorboard`` adds (histograms, gradient norms, layer outputs and images every
epoch); the medians of the wall times of the two kinds of epoch are compared. The
one-time import of the tensorboard package is timed apart.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from .machine import load_average

HOOKS = ("on_train_begin", "on_epoch_begin", "on_train_batch_end", "set_epoch_examples",
         "on_test_begin", "on_test_end", "on_epoch_end", "on_train_end")


def timed(callback, spent):
    """``callback`` with each of its :data:`HOOKS` adding its seconds to ``spent[0]``."""
    for name in HOOKS:
        method = getattr(callback, name)

        def run(*args, _method=method):
            began = time.perf_counter()
            _method(*args)
            spent[0] += time.perf_counter() - began

        setattr(callback, name, run)
    return callback


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tensorboard")
    parser.add_argument("--rounds", type=int, default=7, help="epochs of each kind")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    from handgrad.training.summaries import require

    require("benchmark")
    import_seconds = time.perf_counter() - start

    from threadpoolctl import threadpool_limits

    from handgrad.cli.args import AUGMENT, load_dataset, settings
    from handgrad.cli.train import _compile
    from handgrad.data.augment import augmentation
    from handgrad.training import TensorBoard
    from handgrad.zoo import networks

    dataset = load_dataset("mnist1d")
    run = settings("mnist1d", "resnet")
    model = networks.build("resnet", dataset, seed=0, dtype="float32")
    _compile(model, run, run.lr)  # the command line's optimizer and loss
    augment = augmentation(**AUGMENT["mnist1d"])
    x, y = dataset.x_train.astype(np.float32), dataset.y_train
    times, spent = {"plain": [], "tensorboard": []}, [0.0]
    with tempfile.TemporaryDirectory() as folder, threadpool_limits(1, user_api="blas"):
        for index in range(args.rounds + 1):  # the first round warms up
            for kind in ("plain", "tensorboard") if index % 2 else ("tensorboard", "plain"):
                callbacks = [] if kind == "plain" else [timed(
                    TensorBoard(os.path.join(folder, "tensorboard"), write_images=True),
                    spent if index else [0.0])]
                began = time.perf_counter()
                model.fit(x, y, epochs=1, batch_size=run.batch_size, validation_split=0.1,
                          rng=index, callbacks=callbacks, verbose=0, augment=augment)
                if index:
                    times[kind].append(time.perf_counter() - began)
    plain, logged = (statistics.median(times[k]) for k in ("plain", "tensorboard"))
    print(f"epoch without TensorBoard {plain:.3f}s, with {logged:.3f}s (medians of "
          f"{args.rounds}): overhead {100 * (logged / plain - 1):+.1f}% per epoch; inside "
          f"the callback {spent[0] / args.rounds:.3f}s per epoch "
          f"({100 * spent[0] / sum(times['tensorboard']):.1f}%); "
          f"importing tensorboard once {import_seconds:.2f}s; load average "
          f"{load_average()}")


if __name__ == "__main__":
    main()
