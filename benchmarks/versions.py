"""An earlier version of handgrad against this one, side by side in one process.

    python -m benchmarks.versions REV [--rounds N] [--word2vec]
    HANDGRAD_NUMBA=0 python -m benchmarks.versions REV ...   # the pure-NumPy fallback

``src/handgrad`` of the git revision REV is exported into a temporary folder as the
package ``handgrad_old`` (its imports of ``handgrad`` renamed) and imported beside
``handgrad``; both read ``HANDGRAD_NUMBA`` at import, so both run on the same kernel
path. Every convolution, pooling and breadth case of the harness and the ResNet-18 step
get the same inputs in both versions (each case's runners take the version's package:
``package`` of :meth:`.breadth.MapCase.runners`, ``ops_module`` of
:class:`.cases.HandgradRunner`); per case the old version beside torch and the new
one beside torch run as two blocks of ``--rounds`` rounds, in a random order, and each
version's ratio is against the torch of its own block (with all three in one block the
old version's threads slowed the new one's GEMMs: case 2 float32 13.5-13.9 ms beside
torch alone, 16.0 with the old code in the block). ``--word2vec`` adds one epoch of
skip-gram and CBOW on the 1M-word corpus in each version, gensim beside them.
"""

from __future__ import annotations

if __name__ == "__main__":
    from ._env import set_defaults

    set_defaults()  # before NumPy and torch load

import argparse
import importlib
import io
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile

import numpy as np
import torch

from . import breadth, cases, resnet
from .machine import load_average
from .run import THREADS, time_pair, torch_runner

OLD = "handgrad_old"
_IMPORTS = re.compile(r"\bhandgrad\b")


def export_old(rev, repo, folder):
    """Write ``src/handgrad`` of ``rev`` (in the git checkout ``repo``) into
    ``folder``/handgrad_old with its imports of ``handgrad`` renamed."""
    archive = subprocess.run(["git", "-C", repo, "archive", "--format=tar", rev,
                              "src/handgrad"], check=True, capture_output=True).stdout
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.11.4 on
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, **safe)
    package = os.path.join(folder, OLD)
    os.rename(os.path.join(folder, "src", "handgrad"), package)
    for root, _, files in os.walk(package):
        for name in (n for n in files if n.endswith(".py")):
            path = os.path.join(root, name)
            with open(path) as f:
                text = f.read()
            with open(path, "w") as f:
                f.write(_IMPORTS.sub(OLD, text))
    return package


def _old(module):
    return importlib.import_module(f"{OLD}.{module}")


def _side_by_side(old, new, theirs, rounds, rng):
    """{"old"/"new": (handgrad ms, torch ms)}: each version beside torch in a block of
    its own, the two blocks in a random order."""
    result = {}
    for version in rng.sample(["old", "new"], 2):
        ours, torch_s = time_pair(old if version == "old" else new, theirs, rounds)
        result[version] = (ours * 1e3, torch_s * 1e3)
    return result


def runners(case, dtype, quick=False):
    """(old, new, torch) runners of a case on the same inputs: a case with runners of its
    own builds each version's from the same seeds (:meth:`.breadth.MapCase.runners`'s
    ``package``), a convolution or pooling case shares its arrays."""
    if hasattr(case, "runners"):
        new, theirs = case.runners(dtype, quick=quick)
        old, _ = case.runners(dtype, quick=quick, package=OLD)
        return old, new, theirs
    x, w, b = cases.make_inputs(case, dtype, quick=quick)
    new = cases.HandgradRunner(case, x, w, b)
    old = cases.HandgradRunner(case, x, w, b, ops_module=_old("ops"))
    return old, new, torch_runner(case, x, w, b, new.dy)[0]


def version_rows(rounds, seed=0):
    """(case, dtype name, {"old"/"new": (ms, torch ms)}) of every convolution, pooling and
    breadth case and the ResNet-18 step, in order."""
    rng = random.Random(seed)
    op_cases = [c for c in cases.CASES if not hasattr(c, "runners")]
    for case in [*op_cases, *breadth.BREADTH_CASES, *resnet.MODEL_CASES]:
        if hasattr(case, "skip_reason") and case.skip_reason() is not None:
            continue
        block = max(3, rounds // 2) if case in resnet.MODEL_CASES else rounds
        for dtype in getattr(case, "dtypes", (np.float32, np.float64)):
            yield (case.name, np.dtype(dtype).name,
                   _side_by_side(*runners(case, dtype), block, rng))


def _word2vec_lines():
    from threadpoolctl import threadpool_limits

    from handgrad.data import planted_corpus

    from .word2vec import CORPORA, measure, measure_gensim

    def measure_old(arch):
        model = _old("zoo").Word2Vec(dim=100, arch=arch, objective="negative", seed=0)
        corpus = _old("data").planted_corpus(0, **CORPORA["large"])
        model.build_vocabulary(corpus)
        history = model.fit(corpus, epochs=1, batch_size=512)
        purity = _old("zoo").neighbour_purity(model, corpus.classes, 5)[0]
        return float(np.median(history["words_per_second"])), purity

    corpus = planted_corpus(0, **CORPORA["large"])
    with threadpool_limits(1):
        measure(planted_corpus(0, **CORPORA["quick"]), "skipgram", "negative", 100, 1, 512)
        for arch in ("skipgram", "cbow"):
            old, new = measure_old(arch), measure(corpus, arch, "negative", 100, 1, 512)
            gensim = measure_gensim(corpus, arch, 100, 1)
            yield (f"| word2vec {arch}, one epoch | {old[0]:,.0f} / {new[0]:,.0f} / "
                   f"{gensim[0]:,.0f} | {old[0] / gensim[0]:.2f} | {new[0] / gensim[0]:.2f} | "
                   f"{old[1]:.3f} / {new[2]:.3f} / {gensim[2]:.3f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.versions",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the earlier version: a git revision of this checkout")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per block")
    parser.add_argument("--word2vec", action="store_true",
                        help="also word2vec's words/s and purity (needs gensim)")
    args = parser.parse_args(argv)
    torch.set_num_threads(THREADS)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = "numpy" if os.environ.get("HANDGRAD_NUMBA") == "0" else "compiled"
    with tempfile.TemporaryDirectory() as folder:
        export_old(args.rev, repo, folder)
        sys.path.insert(0, folder)
        print(f"{args.rev} against this checkout, {path} path, load average "
              f"{load_average()}", flush=True)
        print("| case | dtype | old ms (torch) | new ms (torch) | old / torch | new / torch "
              "| old / new |\n|---|---|---:|---:|---:|---:|---:|", flush=True)
        for name, dtype, ms in version_rows(args.rounds):
            (old, t_old), (new, t_new) = ms["old"], ms["new"]
            print(f"| {name} | {dtype} | {old:.2f} ({t_old:.2f}) | {new:.2f} ({t_new:.2f}) | "
                  f"{old / t_old:.2f} | {new / t_new:.2f} | {old / new:.1f}x |", flush=True)
        if args.word2vec:
            print("\n| case | words/s old / new / gensim | old / gensim | new / gensim "
                  "| purity old / new / gensim |\n|---|---:|---:|---:|---:|")
            for line in _word2vec_lines():
                print(line, flush=True)
        print(f"load average at the end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
