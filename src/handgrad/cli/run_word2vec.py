"""``python -m handgrad train --model word2vec``: skip-gram or CBOW word embeddings on a
text corpus (``--dataset text:PATH``, or the generated ``planted`` corpus), written as
``vectors.txt`` (word2vec's text format) and ``model.safetensors`` (the whole model,
``handgrad.zoo.Word2Vec.load``)."""

from __future__ import annotations

import math
import os

from ..data import Corpus
from ..zoo import Word2Vec, neighbour_purity
from .errors import UsageError, configured

NAME = "word2vec"
DEFAULT_DATASET = "planted"
DEFAULT_EPOCHS = 5
DEFAULT_BATCH_SIZE = 512
DEFAULT_DIM = 100
PURITY_K = 5  # neighbours per planted word in the purity
SHOWN_WORDS = 5  # planted words whose neighbours metrics.json lists


def add_arguments(group):
    """This model's options (None: the default named in the help)."""
    group.add_argument("--arch", choices=("skipgram", "cbow"),
                       help="skipgram: each word predicts the words of its window; cbow: the "
                       "mean of the window's vectors predicts the word (default: skipgram)")
    group.add_argument("--objective", choices=("negative", "nce"),
                       help="negative: negative sampling; nce: noise-contrastive estimation, "
                       "with an output bias and the log(K q) correction (default: negative)")
    group.add_argument("--embedding-dim", type=int, metavar="N",
                       help=f"size of the word vectors (default: {DEFAULT_DIM})")
    group.add_argument("--window", type=int, metavar="N",
                       help="largest window; each position draws its own in 1..N (default: 5)")
    group.add_argument("--negatives", type=int, metavar="K",
                       help="noise words per example, drawn from unigram^0.75 (default: 5)")
    group.add_argument("--min-count", type=int, metavar="N",
                       help="drop words seen fewer than N times (default: 5)")
    group.add_argument("--subsample", type=float, metavar="T",
                       help="threshold of the subsampling of frequent words, word2vec's "
                       "(sqrt(f / T) + 1) T / f keep probability; 0: off (default: 1e-3)")


def _checked(args):
    """The Word2Vec arguments and the run's epochs and batch size; a bad value of this
    model's options is a UsageError naming the option (the command line checks
    --epochs, --batch-size and --lr)."""
    for option, value in (("--embedding-dim", args.embedding_dim), ("--window", args.window),
                          ("--negatives", args.negatives), ("--min-count", args.min_count)):
        if value is not None and value < 1:
            raise UsageError(f"{option} must be an int >= 1 for --model word2vec; received "
                             f"{value}")
    if args.subsample is not None and not 0 <= args.subsample < math.inf:
        raise UsageError(f"--subsample must be a finite number >= 0 for --model word2vec; "
                         f"received {args.subsample}")
    given = {"arch": args.arch, "objective": args.objective, "dim": args.embedding_dim,
             "window": args.window, "negatives": args.negatives, "min_count": args.min_count,
             "subsample": args.subsample, "lr": args.lr}
    config = {"dim": DEFAULT_DIM, **{k: v for k, v in given.items() if v is not None}}
    return config, args.epochs or DEFAULT_EPOCHS, args.batch_size or DEFAULT_BATCH_SIZE


def run(args, dataset, out):
    """Train on ``dataset`` (a Corpus), write vectors.txt and model.safetensors into
    ``out``; the metrics hold the per-epoch loss and words/s, the vocabulary size and,
    for the planted corpus, the neighbour purity."""
    if not isinstance(dataset, Corpus):
        raise UsageError(f"--model word2vec trains on a text corpus (--dataset text:PATH or "
                         f"planted); received --dataset {args.dataset!r}")
    config, epochs, batch_size = _checked(args)
    model = configured(Word2Vec, **config, seed=args.seed, dtype=args.dtype)
    model.build_vocabulary(dataset)
    if not args.quiet:
        name = {"negative": "negative sampling", "nce": "NCE"}[model.objective]
        print(f"training word2vec ({model.arch}, {name}, {model.dim} dimensions) on "
              f"{dataset.name}: {len(dataset)} words, a vocabulary of {len(model.vocabulary)} "
              f"(min count {model.min_count}), {epochs} epochs, batch {batch_size}, "
              f"lr {model.lr:g} decaying linearly", flush=True)
    history = model.fit(dataset, epochs=epochs, batch_size=batch_size, verbose=not args.quiet)
    metrics = {**model.config(), "epochs": epochs, "batch_size": batch_size,
               "tokens": len(dataset), "vocabulary_size": len(model.vocabulary),
               "loss": history["loss"], "words_per_second": history["words_per_second"]}
    known = set(model.vocabulary)
    shown = [w for w in dataset.classes if w in known]  # planted words that were kept
    if shown:
        k = min(PURITY_K, len(model.vocabulary) - 1)
        purity, chance = neighbour_purity(model, dataset.classes, k)
        metrics.update(neighbour_purity=purity, purity_chance=chance, purity_k=k,
                       neighbours={w: [n for n, _ in model.most_similar(w, k)]
                                   for w in shown[:SHOWN_WORDS]})
        if not args.quiet:
            print(f"neighbour purity {purity:.3f} ({k} nearest neighbours of each "
                  f"planted word in its class; chance {chance:.3f})")
    paths = [os.path.join(out, "vectors.txt"), os.path.join(out, "model.safetensors")]
    model.save_word2vec_format(paths[0])
    model.save(paths[1])
    return metrics, paths
