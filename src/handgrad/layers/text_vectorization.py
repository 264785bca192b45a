"""Keras's ``TextVectorization``: strings -> integer token ids, with a vocabulary learned by
:meth:`TextVectorization.adapt` (or given), saved in the layer's config.

Keras's rules, written down in tests/test_text_vectorization.py:

- standardize ``"lower_and_strip_punctuation"``: lowercase, then remove every character of
  ``!"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'``; ``"lower"``, ``"strip_punctuation"`` or None;
- split ``"whitespace"`` (runs of whitespace), ``"character"`` or None (the whole string);
- ``ngrams=n`` adds the 2..n-grams (tokens joined by one space) after the unigrams, each
  width in turn; a tuple gives the widths to make;
- vocabulary: index 0 is the padding token ``""``, 1 the OOV token ``"[UNK]"``, then the
  tokens by descending frequency, ties by descending token (Keras sorts by (count, token)
  and reverses), cut to ``max_tokens`` entries in all;
- ``output_mode="int"``: ids (N, L) int64, padded with 0 at the end (or cut) to
  ``output_sequence_length``, else to the batch's longest text.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from .._checks import choice, describe, is_int, positive_int
from .base import Layer
from .caching import keeps_cache
from .registry import register

PADDING, OOV = "", "[UNK]"
#: Keras's DEFAULT_STRIP_REGEX: ASCII punctuation
PUNCTUATION = re.compile(r"[!\"#$%&()*+,\-./:;<=>?@\[\\\]^_`{|}~']")
STANDARDIZE = ("lower_and_strip_punctuation", "lower", "strip_punctuation")
SPLIT = ("whitespace", "character")


def _ngram_widths(owner, ngrams):
    if ngrams is None:
        return None
    if is_int(ngrams):
        return tuple(range(1, positive_int(owner, "ngrams", ngrams) + 1))
    if isinstance(ngrams, (tuple, list)) and ngrams and all(
            is_int(n) and n >= 1 for n in ngrams):
        return tuple(int(n) for n in ngrams)
    raise TypeError(f"{owner}: 'ngrams' must be None, an int >= 1 or a tuple of ints >= 1; "
                    f"received {describe(ngrams)}")


@register
class TextVectorization(Layer):
    """Strings (N,) or (N, 1) -> token ids (N, L) int64 (see the module for Keras's rules).

    ``max_tokens`` (None or an int >= 2) caps the vocabulary, padding and OOV included;
    ``vocabulary`` (a list of tokens, without ``""`` and ``"[UNK]"``) replaces adapt().
    There is no gradient (string input, integer output): backward returns None.
    """

    def __init__(self, max_tokens=None, standardize="lower_and_strip_punctuation",
                 split="whitespace", output_mode="int", output_sequence_length=None,
                 ngrams=None, vocabulary=None, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        if max_tokens is not None and not (is_int(max_tokens) and max_tokens >= 2):
            raise ValueError(f"{owner}: 'max_tokens' must be None or an int >= 2 (padding and "
                             f"OOV count); received {describe(max_tokens)}")
        self.max_tokens = None if max_tokens is None else int(max_tokens)
        self.standardize = None if standardize is None else choice(
            owner, "standardize", standardize, STANDARDIZE)
        self.split = None if split is None else choice(owner, "split", split, SPLIT)
        self.output_mode = choice(owner, "output_mode", output_mode, ("int",))
        self.output_sequence_length = None if output_sequence_length is None else positive_int(
            owner, "output_sequence_length", output_sequence_length)
        self.ngrams = ngrams if ngrams is None or is_int(ngrams) else tuple(ngrams) if isinstance(
            ngrams, list) else ngrams
        self._widths = _ngram_widths(owner, ngrams)
        self._tokens = None
        if vocabulary is not None:
            self.set_vocabulary(vocabulary)

    def get_config(self):
        ngrams = list(self.ngrams) if isinstance(self.ngrams, tuple) else self.ngrams
        return {**super().get_config(), "max_tokens": self.max_tokens,
                "standardize": self.standardize, "split": self.split,
                "output_mode": self.output_mode,
                "output_sequence_length": self.output_sequence_length, "ngrams": ngrams,
                "vocabulary": None if self._tokens is None else list(self._tokens)}

    # ------------------------------------------------------------- vocabulary
    def set_vocabulary(self, vocabulary):
        """Use ``vocabulary`` (a list of distinct str, optionally led by ``""`` and
        ``"[UNK]"``) in this order, after the padding and OOV entries."""
        tokens = list(vocabulary) if isinstance(vocabulary, (list, tuple, np.ndarray)) else None
        if tokens is None or not all(isinstance(t, str) for t in tokens):
            raise TypeError(f"{self.label}: 'vocabulary' must be a list of str; received "
                            f"{describe(vocabulary)}")
        if tokens[:2] == [PADDING, OOV]:
            tokens = tokens[2:]
        if PADDING in tokens or OOV in tokens or len(set(tokens)) != len(tokens):
            raise ValueError(f"{self.label}: 'vocabulary' must hold distinct tokens, with "
                             f"{PADDING!r} and {OOV!r} only as its first two entries")
        if self.max_tokens is not None and len(tokens) + 2 > self.max_tokens:
            raise ValueError(f"{self.label}: 'vocabulary' has {len(tokens)} tokens + padding + "
                             f"OOV, more than max_tokens={self.max_tokens}")
        self._tokens = tokens
        self._index = {token: i + 2 for i, token in enumerate(tokens)}

    def get_vocabulary(self):
        """``["", "[UNK]", tokens...]``: the token of each id."""
        self._check_vocabulary()
        return [PADDING, OOV, *self._tokens]

    def vocabulary_size(self):
        return len(self.get_vocabulary())

    def _check_vocabulary(self):
        if self._tokens is None:
            raise RuntimeError(f"{self.label}: no vocabulary yet: call adapt(texts) first or "
                               f"give 'vocabulary'")

    def adapt(self, data):
        """Learn the vocabulary from ``data``, strings (N,) or (N, 1) (see the module for
        the order)."""
        counts = Counter()
        for tokens in self._tokenize(data):
            counts.update(tokens)
        counts.pop(PADDING, None)
        counts.pop(OOV, None)
        ranked = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
        cap = None if self.max_tokens is None else self.max_tokens - 2
        self.set_vocabulary([token for token, _ in ranked[:cap]])
        return self

    # ----------------------------------------------------------------- tokens
    def _texts(self, data):
        texts = np.asarray(data, dtype=object) if isinstance(
            data, (list, tuple, np.ndarray)) else None
        if texts is not None and texts.ndim == 2 and texts.shape[1] == 1:
            texts = texts[:, 0]
        if texts is None or texts.ndim != 1:
            raise TypeError(f"{self.label}: expects strings (N,) or (N, 1) (a list or an "
                            f"array of str); received {describe(data)}")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"{self.label}: entry {i} is not a str; received "
                                f"{describe(text)}")
        return texts

    def _standardized(self, text):
        if self.standardize in ("lower", "lower_and_strip_punctuation"):
            text = text.lower()
        if self.standardize in ("strip_punctuation", "lower_and_strip_punctuation"):
            text = PUNCTUATION.sub("", text)
        return text

    def _tokenize(self, data):
        """The token list of each text: standardized, split, with n-grams."""
        for text in self._texts(data):
            text = self._standardized(text)
            words = text.split() if self.split == "whitespace" else (
                list(text) if self.split == "character" else [text])
            if self._widths is None:
                yield words
            else:
                yield [" ".join(words[i:i + n]) for n in self._widths
                       for i in range(len(words) - n + 1)]

    # ---------------------------------------------------------------- forward
    def output_shape(self, input_shape):
        if self.output_sequence_length is None:
            raise ValueError(f"{self.label}: the output length follows each batch's longest "
                             f"text; give 'output_sequence_length' for a fixed shape")
        return (self.output_sequence_length,)

    def forward(self, x, training=True, grad=None):
        """Token ids (N, L) int64 of the strings ``x``; keeps an (empty) cache when
        ``grad``."""
        grad = keeps_cache(self.label, training, grad)
        self._check_vocabulary()
        rows = [[self._index.get(t, 1) for t in tokens] for tokens in self._tokenize(x)]
        length = self.output_sequence_length
        if length is None:
            length = max((len(r) for r in rows), default=0)
        ids = np.zeros((len(rows), length), dtype=np.int64)
        for i, row in enumerate(rows):
            row = row[:length]
            ids[i, :len(row)] = row
        if not self.built:
            self.build(())
        if grad:
            self._caches.append(None)
        return ids

    def _backward(self, dy, cache):
        return None, {}
