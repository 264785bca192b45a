"""word2vec (Mikolov et al., 2013): skip-gram and CBOW word embeddings, trained with
negative sampling or noise-contrastive estimation (NCE), by sparse SGD.

```python
from handgrad.data import planted_corpus
from handgrad.zoo import Word2Vec

model = Word2Vec(dim=32, arch="skipgram", objective="negative", seed=0)
history = model.fit(planted_corpus(), epochs=3)          # a History
model.most_similar(model.vocabulary[0], k=5)     # [(word, cosine), ...]
model.save_word2vec_format("vectors.txt")        # "V D", then "word v1 ... vD"
```

The model holds two tables, input vectors ``W_in`` (V, D) (the embeddings) and output
vectors ``W_out`` (V, D), plus, for NCE, an output bias (V,). Each step takes a batch
of examples (skip-gram: a (centre, context) pair, the centre predicting the context;
CBOW: a word predicted from the mean of its window's vectors), scores the true word and
``negatives`` words drawn from the noise distribution ``q ~ count^0.75``, and moves only
the rows the batch touches: the objective and its sparse gradient are in
:mod:`.word2vec_math`, the example generation in :mod:`.word2vec_data`.

As in word2vec's C code: words under ``min_count`` are dropped before windowing;
frequent words are subsampled (``keep = (sqrt(z / t) + 1) t / z``, z the word's
frequency, t = ``subsample``); the window of each position is drawn uniformly in
``1..window``; ``W_in`` starts uniform in ``+-0.5 / D`` and ``W_out`` at zero; the
learning rate decays linearly from ``lr`` to ``lr * 1e-4`` over all the words of all
epochs; a noise word equal to the target is skipped (negative sampling only; NCE's
estimator counts every draw).

Two training paths compute the same objective. With the compiled kernels on (numba),
:meth:`Word2Vec.fit` runs word2vec's own loop compiled (:mod:`.word2vec_kernels`): one SGD
step per example in reading order, noise words from a unigram^0.75 table. Without it,
or with ``HANDGRAD_NUMBA=0``, it takes batched NumPy steps: the sum of a batch's
gradients times the learning rate, word2vec's per-example step applied to a batch at once
(:meth:`Word2Vec.train_batch`), the reference the compiled step is tested against.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np

from .._checks import as_generator, choice, describe, float_dtype
from .._hyper import number
from ..data.text import int_at_least
from ..ops.compiled import compiled_kernels_enabled
from ..training import History, hooks
from . import word2vec_data as data
from . import word2vec_kernels as kernels
from .word2vec_files import read_model, write_model, write_vectors
from .word2vec_math import batch_objective, sgd_step

# Skip-gram: word2vec's 0.025. CBOW: 4x word2vec's 0.05, since word2vec adds the mean's
# error undivided to each of the window's n ~ 6 vectors where the gradient of the mean
# gives each 1/n of it; at 0.05 the input vectors learned n times slower and the classes
# of the 1M-word planted corpus came out at purity 0.94 (gensim 1.00; 0.1 and 0.2: 1.00).
DEFAULT_LR = {"skipgram": 0.025, "cbow": 0.2}
MIN_LR_FRACTION = 1e-4
CHUNK_WORDS = 100_000  # words turned into examples at a time (windows stay inside)


class UnknownWordError(KeyError, ValueError):
    """A word that is not in the vocabulary (a KeyError, as in a dict, and a ValueError)."""

    def __str__(self):
        return str(self.args[0])


class Word2Vec:
    """Word embeddings by skip-gram or CBOW with negative sampling or NCE.

    ``dim``: the size D of the vectors; ``arch``: ``"skipgram"`` or ``"cbow"``;
    ``objective``: ``"negative"`` or ``"nce"``; ``negatives``: noise words K per
    example; ``window``: the largest window (the effective one is drawn in 1..window);
    ``min_count``: words seen fewer times are dropped; ``subsample``: the threshold t
    of the subsampling of frequent words (0: off); ``lr``: the initial learning rate
    (None: 0.025 for skip-gram, 0.2 for CBOW), decayed linearly; ``seed``: an int or
    a Generator for the initial vectors, the sampling and the order of examples;
    ``dtype``: float32 or float64.
    """

    def __init__(self, dim=100, arch="skipgram", objective="negative", negatives=5,
                 window=5, min_count=5, subsample=1e-3, lr=None, seed=0, dtype="float32"):
        op = "Word2Vec"
        self.dim = int_at_least(op, "dim", dim, 1)
        self.arch = choice(op, "arch", arch, ("skipgram", "cbow"))
        self.objective = choice(op, "objective", objective, ("negative", "nce"))
        self.negatives = int_at_least(op, "negatives", negatives, 1)
        self.window = int_at_least(op, "window", window, 1)
        self.min_count = int_at_least(op, "min_count", min_count, 1)
        self.subsample = number(op, "subsample", subsample, low=0)
        self.lr = DEFAULT_LR[self.arch] if lr is None else number(op, "lr", lr, low=0,
                                                                  low_open=True)
        self.dtype = float_dtype(op, "dtype", dtype, allow_none=False)
        self.rng = as_generator(op, "seed", seed, allow_none=False)
        self.vocabulary: list[str] = []
        self.counts = np.zeros(0, dtype=np.int64)
        self.tables: dict[str, np.ndarray] = {}
        self.history: dict[str, list] = {"loss": [], "words_per_second": [], "seconds": []}
        self._index: dict[str, int] = {}
        self._unit_vectors = None
        self._noise_shift = None
        self._noise_table = None
        self._noise_cdf = None

    # ------------------------------------------------------------------ vocabulary
    def config(self) -> dict:
        """The constructor's arguments (without the seed), as JSON values."""
        return {"dim": self.dim, "arch": self.arch, "objective": self.objective,
                "negatives": self.negatives, "window": self.window,
                "min_count": self.min_count, "subsample": self.subsample, "lr": self.lr,
                "dtype": self.dtype.name}

    def build_vocabulary(self, corpus) -> Word2Vec:
        """Count the words of ``corpus`` (a Corpus or a list of str), keep those seen at
        least ``min_count`` times (most frequent first) and initialize the tables."""
        return self._build(data.as_tokens("build_vocabulary", corpus))

    def _build(self, tokens) -> Word2Vec:
        words, counts = data.build_vocabulary(tokens, self.min_count)
        if len(words) < 2:
            raise ValueError(f"Word2Vec: the corpus has {len(words)} word(s) seen at least "
                             f"min_count = {self.min_count} times; at least 2 are needed "
                             f"(lower min_count or give more text)")
        self._set_vocabulary(words, counts)
        size = (len(words), self.dim)
        half_width = 0.5 / self.dim
        self.tables = {"input": self.rng.uniform(-half_width, half_width, size).astype(self.dtype),
                       "output": np.zeros(size, self.dtype)}
        if self.objective == "nce":
            self.tables["bias"] = np.zeros(len(words), self.dtype)
        return self

    def _set_vocabulary(self, words, counts):
        self.vocabulary, self.counts = list(words), np.asarray(counts, dtype=np.int64)
        self._index = {w: i for i, w in enumerate(self.vocabulary)}
        self._unit_vectors, self._noise_table = None, None
        self._noise_cdf = np.cumsum(self.noise_distribution)  # the batched path's sampler
        # NCE's log(K q(w)) (V,) in the model's dtype; None for negative sampling.
        self._noise_shift = (np.log(self.negatives * self.noise_distribution).astype(self.dtype)
                             if self.objective == "nce" else None)

    @property
    def noise_distribution(self) -> np.ndarray:
        """``q`` (V,): count^0.75, normalized (float64)."""
        return data.noise_distribution(self.counts)

    @property
    def keep_probabilities(self) -> np.ndarray:
        """The probability (V,) that subsampling keeps an occurrence of each word."""
        return data.keep_probabilities(self.counts, self.subsample)

    # -------------------------------------------------------------------- training
    def _examples(self, ids):
        make = data.skipgram_examples if self.arch == "skipgram" else data.cbow_examples
        return make(data.subsample(ids, self.keep_probabilities, self.rng), self.window,
                    self.rng)

    def train_batch(self, batch, lr) -> float:
        """One sparse SGD step on ``batch`` (a :class:`~.word2vec_math.Batch`); returns
        its summed loss. Only the rows the batch touches change."""
        tables = self.tables
        loss, grads = batch_objective(tables["input"], tables["output"], tables.get("bias"),
                                      self._noise_shift, batch)
        for name, grad in zip(("input", "output", "bias"), grads):
            if grad is not None:
                sgd_step(tables[name], grad, lr)
        self._unit_vectors = None
        return loss

    def fit(self, x, y=None, epochs=5, batch_size=512, callbacks=(), verbose=0):
        """Train on the corpus ``x`` (a Corpus or a list of str) for ``epochs`` passes of
        ``batch_size`` examples per step (skip-gram: (centre, context) pairs; CBOW:
        words with their windows; the compiled path steps once per example and calls the
        batch hooks once per chunk of ``CHUNK_WORDS`` words, ``batch_size`` unused); the
        vocabulary is built on the first call. Returns a
        History (and extends ``history``, saved with the model): the mean loss per
        example and the words per second of each epoch (words of the vocabulary read,
        before subsampling). ``callbacks`` get Keras's hooks (``on_train_batch_end`` with
        the step's mean ``loss``); ``stop_training`` ends training after a step.

        Not :meth:`handgrad.training.TrainingMixin.fit`: word2vec's training is no step
        over slices of a fixed ``x``. Each epoch makes its examples afresh from the
        corpus (subsampling, a random window per position), so an epoch's steps and
        their count are not known before it, and the learning rate decays over the
        words of all epochs. It walks the corpus itself, with the loop's protocol:
        no targets, the callbacks' hooks, a History."""
        op = "Word2Vec.fit"
        if y is not None:
            raise TypeError(f"{op}: 'y' must be None (word2vec learns from the corpus alone; "
                            f"give epochs by keyword, fit(x, epochs=5)); received "
                            f"{describe(y)}")
        tokens = data.as_tokens(op, x)
        epochs = int_at_least(op, "epochs", epochs, 1)
        batch_size = int_at_least(op, "batch_size", batch_size, 1)
        callbacks = [History(), *hooks.prepare(op, callbacks, self)]
        callbacks[0].set_model(self)
        if not self.tables:
            self._build(tokens)
        ids = data.encode(tokens, self._index)
        if len(ids) < 2:
            raise ValueError(f"{op}: the corpus has {len(ids)} word(s) of the vocabulary; at "
                             f"least 2 are needed")
        self.stop_training, logs = False, {}
        hooks.notify(callbacks, "on_train_begin", {})
        for epoch in range(epochs):
            hooks.notify(callbacks, "on_epoch_begin", epoch, {})
            logs = self._epoch(ids, epoch, epochs, batch_size, callbacks)
            for key, value in logs.items():
                self.history[key].append(value)
            hooks.notify(callbacks, "on_epoch_end", epoch, logs)
            if verbose:
                print(f"epoch {len(self.history['loss'])}: loss {logs['loss']:.4f}, "
                      f"{logs['words_per_second']:,.0f} words/s", flush=True)
            if self.stop_training:
                break
        hooks.notify(callbacks, "on_train_end", logs)
        return callbacks[0]

    def _epoch(self, ids, epoch, epochs, batch_size, callbacks) -> dict:
        """One pass over ``ids``, chunk by chunk (windows stay inside a chunk), by the
        compiled per-example SGD of word2vec's C code when numba is enabled (one hook
        step per chunk), else by batched steps of ``batch_size`` examples: the epoch's
        logs."""
        steps = self._compiled_steps if compiled_kernels_enabled(*self.tables.values()) else (
            self._batched_steps)
        total = epochs * len(ids)
        start, loss, examples, step = time.perf_counter(), 0.0, 0, 0
        for chunk_start in range(0, len(ids), CHUNK_WORDS):
            chunk = ids[chunk_start:chunk_start + CHUNK_WORDS]
            progress = ((epoch * len(ids) + chunk_start) / total, len(chunk) / total)
            for lr, run in steps(chunk, progress, batch_size):
                hooks.notify(callbacks, "on_train_batch_begin", step, {})
                step_loss, count = run()
                hooks.notify(callbacks, "on_train_batch_end", step,
                             {"loss": step_loss / max(count, 1), "lr": lr})
                loss, examples, step = loss + step_loss, examples + count, step + 1
                if self.stop_training:
                    break
            if self.stop_training:
                break
        seconds = time.perf_counter() - start
        return {"loss": loss / max(examples, 1), "words_per_second": len(ids) / seconds,
                "seconds": seconds}

    def _rate(self, progress) -> float:
        return self.lr * max(1.0 - progress, MIN_LR_FRACTION)

    def _batched_steps(self, chunk, progress, batch_size):
        """``(lr, run)`` per batch of the chunk's examples; ``run()`` takes the step and
        returns ``(loss, examples)``. ``progress``: the chunk's start and length as
        fractions of all the words of training."""
        inputs, mask, targets = self._examples(chunk)
        for first in range(0, len(targets), batch_size):
            part = slice(first, first + batch_size)
            lr = self._rate(progress[0] + progress[1] * first / len(targets))
            batch = data.make_batch(inputs[part], mask[part], targets[part], self.negatives,
                                    self._noise_cdf, self.objective == "negative", self.dtype,
                                    self.rng)
            yield lr, lambda batch=batch, lr=lr: (self.train_batch(batch, lr), len(batch))

    def _compiled_steps(self, chunk, progress, batch_size):
        """One ``(lr, run)`` for the whole chunk: word2vec's per-example SGD, compiled
        (:func:`.word2vec_kernels.train_stream`); ``batch_size`` is unused."""
        kept = data.subsample(chunk, self.keep_probabilities, self.rng)
        if self._noise_table is None:
            self._noise_table = data.noise_table(self.counts)
        empty = np.zeros(0, self.dtype)
        bias = self.tables.get("bias", empty)
        shift = empty if self._noise_shift is None else self._noise_shift
        seed = np.uint64(self.rng.integers(2**63, dtype=np.uint64))

        def run():
            loss, count = kernels.train_stream(
                self.tables["input"], self.tables["output"], bias, shift, kept, self.window,
                self.negatives, self._noise_table, self.arch == "cbow",
                self.objective == "negative", self.lr, MIN_LR_FRACTION, progress[0],
                progress[1] / max(len(kept), 1), seed)
            self._unit_vectors = None
            return loss, count

        yield self._rate(progress[0]), run

    # --------------------------------------------------------------------- queries
    @property
    def vectors(self) -> np.ndarray:
        """The word vectors ``W_in`` (V, D), row i for ``vocabulary[i]``."""
        self._check_trained("vectors")
        return self.tables["input"]

    def _check_trained(self, op):
        if not self.tables:
            raise ValueError(f"{op}: the model has no vocabulary yet; call fit first")

    def index(self, word) -> int:
        """The row of ``word``; an UnknownWordError (KeyError and ValueError) names it."""
        self._check_trained("index")
        if not isinstance(word, str):
            raise TypeError(f"Word2Vec: a word must be a str; received {describe(word)}")
        if word not in self._index:
            raise UnknownWordError(f"the word {word!r} is not in the vocabulary "
                                   f"({len(self.vocabulary)} words seen at least "
                                   f"min_count = {self.min_count} times)")
        return self._index[word]

    def word_vector(self, word) -> np.ndarray:
        """A copy of the vector (D,) of ``word``."""
        return self.vectors[self.index(word)].copy()

    def unit_vectors(self) -> np.ndarray:
        """The vectors scaled to unit length (a zero vector stays zero), float64."""
        if self._unit_vectors is None:
            vectors = self.vectors.astype(np.float64)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            self._unit_vectors = vectors / np.where(norms > 0, norms, 1.0)
        return self._unit_vectors

    def most_similar(self, word, k=10) -> list:
        """The ``k`` words of highest cosine similarity to ``word`` (itself excluded),
        most similar first: a list of ``(word, cosine)``."""
        row = self.index(word)
        k = int_at_least("most_similar", "k", k, 1)
        if k > len(self.vocabulary) - 1:
            raise ValueError(f"most_similar: 'k' must be at most the {len(self.vocabulary) - 1}"
                             f" other words of the vocabulary; received {k}")
        unit = self.unit_vectors()
        cosine = unit @ unit[row]
        cosine[row] = -np.inf
        top = np.argpartition(-cosine, k - 1)[:k]
        top = top[np.lexsort((top, -cosine[top]))]  # by similarity, ties by row
        return [(self.vocabulary[i], float(cosine[i])) for i in top]

    # ----------------------------------------------------------------------- files
    def save_word2vec_format(self, path) -> None:
        """Write the vectors in word2vec's text format: a line ``V D``, then one line
        ``word v1 ... vD`` per word, UTF-8, with 9 significant digits for float32 and 17
        for float64: enough to read back the exact values."""
        self._check_trained("save_word2vec_format")
        write_vectors(path, self.vocabulary, self.vectors)

    def save(self, path) -> None:
        """Write the whole model (tables, vocabulary and counts, configuration, history
        and the random generator's state) as one safetensors file: loading it and
        training on gives the same result as training on without saving."""
        self._check_trained("save")
        write_model(path, self)

    @classmethod
    def load(cls, path) -> Word2Vec:
        """The model written by :meth:`save`; a malformed file is a ValueError naming the
        file and the field."""
        config, rng, words, counts, tables, history = read_model(
            path, lambda config: cls(**config).config())
        model = cls(**config, seed=rng)
        model._set_vocabulary(words, counts)
        model.tables, model.history = tables, history
        return model


def neighbour_purity(model, classes: dict, k: int = 5):
    """``(purity, chance)``: over the words of ``classes`` (word -> class) in the
    vocabulary, the mean fraction of each one's ``k`` nearest neighbours (cosine, the
    whole vocabulary) of its own class; ``chance`` is that fraction for neighbours drawn
    at random, the mean of ``(size of its class - 1) / (V - 1)``. ``model``: a Word2Vec,
    or any object with its ``vocabulary`` and ``most_similar(word, k)``."""
    vocabulary = set(model.vocabulary)
    known = [w for w in classes if w in vocabulary]
    if not known:
        raise ValueError("neighbour_purity: no word of 'classes' is in the vocabulary")
    sizes = Counter(classes[w] for w in known)
    hits, chance = [], []
    for word in known:
        label = classes[word]
        neighbours = [w for w, _ in model.most_similar(word, k)]
        hits.append(np.mean([classes.get(w) == label for w in neighbours]))
        chance.append((sizes[label] - 1) / (len(model.vocabulary) - 1))
    return float(np.mean(hits)), float(np.mean(chance))
