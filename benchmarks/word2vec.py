"""word2vec throughput: words per second of ``Word2Vec.fit`` for skip-gram and CBOW with
negative sampling and NCE, on one BLAS thread.

    python -m benchmarks.word2vec            # the planted corpus and a 1M-word one
    python -m benchmarks.word2vec --quick    # a small corpus, one epoch (a smoke test)

Words per second counts the words of the vocabulary read (before subsampling), as
word2vec reports: the median over the epochs by the wall clock, and over all epochs by
the process's CPU time (which a busy machine disturbs less). The neighbour purity of
the planted words is printed with it.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"  # before NumPy loads

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from handgrad.data import planted_corpus  # noqa: E402
from handgrad.zoo import Word2Vec, neighbour_purity  # noqa: E402

CASES = [(arch, objective) for arch in ("skipgram", "cbow") for objective in ("negative", "nce")]
CORPORA = {  # name -> planted_corpus arguments
    "planted": {},  # 120k words, 126 distinct
    "large": {"classes": 100, "words_per_class": 50, "filler_words": 2000,
              "sentences": 100_000},  # 1M words, 7,000 distinct
    "quick": {"sentences": 500},
}


def measure(corpus, arch, objective, dim, epochs, batch_size):
    """``(wall words/s, CPU words/s, purity)``: the median over the epochs by the wall
    clock, and all epochs' words over the process's CPU time."""
    model = Word2Vec(dim=dim, arch=arch, objective=objective, seed=0)
    model.build_vocabulary(corpus)
    start = time.process_time()
    history = model.fit(corpus, epochs=epochs, batch_size=batch_size)
    cpu = epochs * int(np.sum(model.counts)) / (time.process_time() - start)
    purity, _ = neighbour_purity(model, corpus.classes, 5)
    return float(np.median(history["words_per_second"])), cpu, purity


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.word2vec",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small corpus, one epoch")
    parser.add_argument("--dim", type=int, default=100, help="vector size (default: 100)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per case (default: 3)")
    parser.add_argument("--batch-size", type=int, default=512, help="default: 512")
    parser.add_argument("--corpora", nargs="+", choices=("planted", "large"),
                        default=["planted", "large"], help="default: planted large")
    args = parser.parse_args(argv)
    names, epochs = (["quick"], 1) if args.quick else (args.corpora, args.epochs)
    print(f"numpy {np.__version__}, one BLAS thread, dim {args.dim}, batch {args.batch_size}, "
          f"window 5, 5 noise words, load average {os.getloadavg()[0]:.1f}")
    print(f"{'corpus':<9}{'words':>10}{'vocab':>7}  {'case':<19}{'words/s':>10}"
          f"{'CPU words/s':>13}{'purity':>8}")
    for name in names:
        corpus = planted_corpus(0, **CORPORA[name])
        vocab = len(set(corpus.tokens))
        for arch, objective in CASES:
            wall, cpu, purity = measure(corpus, arch, objective, args.dim, epochs,
                                        args.batch_size)
            print(f"{name:<9}{len(corpus):>10,}{vocab:>7,}  {arch + ' ' + objective:<19}"
                  f"{wall:>10,.0f}{cpu:>13,.0f}{purity:>8.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
