"""``python -m handgrad train --model vae|wgan-gp|word2vec|rbm``: the generative and
embedding models of :mod:`handgrad.zoo`, each trained by its own runner.

A runner is a module with ``NAME`` (the ``--model`` value), ``DEFAULT_DATASET``,
``add_arguments(group)`` (its own options) and ``run(args, dataset, out) -> (metrics,
paths)``: it trains, writes its model and pictures into ``out`` and returns the metrics
(written here as ``metrics.json``) and the paths it wrote. A runner raises
:class:`~handgrad.cli.errors.UsageError` for a bad option or dataset (status 2); any other
error of the run is reported as a failed training (status 1), each in one line.
"""

from __future__ import annotations

import json
import os
import time

from ..zoo.networks import MODELS
from .args import RUN_ERRORS, UsageError, load_dataset, reason
from .run_folder import environment, json_safe, output_dir
from .runners import RUNNERS


def cmd_train_generative(args):
    """Train ``args.model`` (a key of RUNNERS) and write its run folder."""
    runner = RUNNERS[args.model]
    if args.distributed:
        raise UsageError(f"--distributed trains the classifiers (--model {', '.join(MODELS)}); "
                         f"--model {args.model} trains in one process")
    dataset = load_dataset(args.dataset, verbose=not args.quiet)
    out, _ = output_dir(args)
    start = time.perf_counter()
    try:
        metrics, paths = runner.run(args, dataset, out)
    except KeyboardInterrupt:
        raise UsageError("training interrupted", status=130) from None
    except RUN_ERRORS as error:
        raise UsageError(f"training failed: {reason(error)}", status=1) from None
    metrics = {"dataset": args.dataset, "model": args.model, "seed": args.seed,
               "dtype": args.dtype, **metrics,
               "train_seconds": round(time.perf_counter() - start, 2),
               "environment": environment()}
    path = os.path.join(out, "metrics.json")
    with open(path, "w") as f:
        json.dump(json_safe(metrics), f, indent=2, allow_nan=False)
    print(f"wrote {', '.join([*paths, path])}")
    return 0
