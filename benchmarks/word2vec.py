"""word2vec throughput: words per second of ``Word2Vec.fit`` for skip-gram and CBOW with
negative sampling and NCE, on one thread, beside gensim's ``Word2Vec`` with one worker
(negative sampling; when gensim is installed).

    python -m benchmarks.word2vec            # the planted corpus and a 1M-word one
    python -m benchmarks.word2vec --quick    # a small corpus, one epoch (a smoke test)
    HANDGRAD_NUMBA=0 python -m benchmarks.word2vec   # handgrad's pure-NumPy path

Words per second counts the words of the vocabulary read (before subsampling), as
word2vec reports: the median over the epochs by the wall clock, and over all epochs by
the process's CPU time (which a busy machine disturbs less). The neighbour purity of
the planted words is printed with it. Both libraries get the same settings (vectors of
``--dim``, window 5, 5 noise words, min count 5, subsampling 1e-3, float32, each its
default learning rate) and the same token stream; gensim reads it in pieces of 10,000
words (its longest sentence), handgrad in chunks of 100,000 (windows stay inside). With
``--rounds`` above 1 the two alternate, round by round, and the medians are printed.
*ratio*: handgrad's words/s over gensim's (met: at least 1, and purity at least
gensim's).
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"  # before NumPy loads

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from handgrad.data import planted_corpus  # noqa: E402
from handgrad.ops._engine import dispatch  # noqa: E402
from handgrad.zoo import Word2Vec, neighbour_purity  # noqa: E402

from .machine import load_average  # noqa: E402

CASES = [(arch, objective) for arch in ("skipgram", "cbow") for objective in ("negative", "nce")]
CORPORA = {  # name -> planted_corpus arguments
    "planted": {},  # 120k words, 126 distinct
    "large": {"classes": 100, "words_per_class": 50, "filler_words": 2000,
              "sentences": 100_000},  # 1M words, 7,000 distinct
    "quick": {"sentences": 500},
}
GENSIM_SENTENCE = 10_000  # gensim's MAX_WORDS_IN_BATCH: longer sentences are cut


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


class GensimVectors:
    """gensim's vectors with the two members :func:`neighbour_purity` reads."""

    def __init__(self, wv):
        self.wv, self.vocabulary = wv, list(wv.index_to_key)

    def most_similar(self, word, k):
        return self.wv.most_similar(word, topn=k)


def measure_gensim(corpus, arch, dim, epochs):
    """gensim's ``(wall words/s, CPU words/s, purity)``, measured as :func:`measure`."""
    from gensim.models import Word2Vec as GensimWord2Vec
    from gensim.models.callbacks import CallbackAny2Vec

    class EpochClock(CallbackAny2Vec):
        def __init__(self):
            self.seconds = []

        def on_epoch_begin(self, model):
            self.start = time.perf_counter()

        def on_epoch_end(self, model):
            self.seconds.append(time.perf_counter() - self.start)

    tokens = corpus.tokens
    sentences = [tokens[i:i + GENSIM_SENTENCE] for i in range(0, len(tokens), GENSIM_SENTENCE)]
    model = GensimWord2Vec(vector_size=dim, sg=int(arch == "skipgram"), hs=0, negative=5,
                           window=5, min_count=5, sample=1e-3, workers=1, seed=0)
    model.build_vocab(sentences)
    words, clock = sum(model.wv.get_vecattr(w, "count") for w in model.wv.index_to_key), (
        EpochClock())
    start = time.process_time()
    model.train(sentences, total_examples=model.corpus_count, epochs=epochs, callbacks=[clock])
    cpu = epochs * words / (time.process_time() - start)
    purity, _ = neighbour_purity(GensimVectors(model.wv), corpus.classes, 5)
    return float(np.median([words / s for s in clock.seconds])), cpu, purity


def harness_rows(path):
    """Rows of group ``"word2vec"`` for :mod:`benchmarks.targets` (``python -m benchmarks``):
    on the ``large`` corpus, one epoch of each library after a warm-up, skip-gram and CBOW
    with negative sampling; ``speed`` = handgrad's words/s over gensim's. No rows without
    gensim."""
    if importlib.util.find_spec("gensim") is None:
        return []
    from threadpoolctl import threadpool_limits

    corpus, rows = planted_corpus(0, **CORPORA["large"]), []
    with threadpool_limits(1):
        measure(planted_corpus(0, **CORPORA["quick"]), "skipgram", "negative", 100, 1, 512)
        for arch in ("skipgram", "cbow"):
            ours = measure(corpus, arch, "negative", 100, 1, 512)
            theirs = measure_gensim(corpus, arch, 100, 1)
            rows.append({"case": f"word2vec {arch} negative, 1M words", "dtype": "float32",
                         "path": path, "group": "word2vec", "speed": ours[0] / theirs[0],
                         "words_per_s": (ours[0], theirs[0]), "purity": (ours[2], theirs[2])})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.word2vec",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small corpus, one epoch")
    parser.add_argument("--dim", type=int, default=100, help="vector size (default: 100)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per case (default: 3)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="handgrad and gensim alternate this many times (default: 1)")
    parser.add_argument("--batch-size", type=int, default=512,
                        help="the NumPy path's batch (default: 512)")
    parser.add_argument("--corpora", nargs="+", choices=("planted", "large"),
                        default=["planted", "large"], help="default: planted large")
    parser.add_argument("--no-gensim", action="store_true", help="handgrad only")
    args = parser.parse_args(argv)
    names, epochs = (["quick"], 1) if args.quick else (args.corpora, args.epochs)
    gensim = not args.no_gensim and importlib.util.find_spec("gensim") is not None
    path = ("compiled per-example SGD (numba)" if dispatch.enabled()
            else f"batched NumPy, batch {args.batch_size}")
    print(f"numpy {np.__version__}, one thread, dim {args.dim}, window 5, 5 noise words, "
          f"{epochs} epochs, handgrad: {path}; gensim: "
          f"{'one worker' if gensim else 'not installed (or --no-gensim)'}; load average "
          f"{load_average()}")
    print(f"{'corpus':<9}{'words':>10}{'vocab':>7}  {'case':<29}{'words/s':>10}"
          f"{'CPU words/s':>13}{'purity':>8}{'ratio':>7}{'CPU ratio':>10}  target")
    for name in names:
        corpus = planted_corpus(0, **CORPORA[name])
        vocab = len(set(corpus.tokens))
        for arch, objective in CASES:
            beside = gensim and objective == "negative"
            runs = {"handgrad": [], "gensim": []}
            for _ in range(max(args.rounds, 1)):
                runs["handgrad"].append(measure(corpus, arch, objective, args.dim, epochs,
                                                args.batch_size))
                if beside:
                    runs["gensim"].append(measure_gensim(corpus, arch, args.dim, epochs))
            rows = {lib: np.median(np.array(r), axis=0) for lib, r in runs.items() if r}
            for lib, (wall, cpu, purity) in rows.items():
                ratio = ""
                if lib == "handgrad" and beside:
                    other = rows["gensim"]
                    met = wall >= other[0] and purity >= other[2]
                    ratio = (f"{wall / other[0]:>7.2f}{cpu / other[1]:>10.2f}  "
                             f"{'met' if met else 'not met'}")
                case = f"{lib} {arch} {objective}"
                print(f"{name:<9}{len(corpus):>10,}{vocab:>7,}  {case:<29}{wall:>10,.0f}"
                      f"{cpu:>13,.0f}{purity:>8.3f}{ratio}", flush=True)
    print(f"load average at the end {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
