"""Text corpora for word embeddings: a UTF-8 file (``read_text``) or a generated demo
corpus with planted word classes (``planted_corpus``).

Tokenization (:func:`tokenize`) is deliberately simple: the text is lowercased
(``str.lower``) and split into the maximal runs of Unicode word characters (regular
expression ``\\w+``: letters, digits and the underscore, in any script); everything else
(spaces, punctuation, apostrophes, hyphens) separates words. ``"Où est l'été?"`` gives
``["où", "est", "l", "été"]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .._checks import as_generator, describe, is_int

_WORD = re.compile(r"\w+")
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")


def tokenize(text: str) -> list[str]:
    """The words of ``text``: lowercased runs of word characters (see the module)."""
    if not isinstance(text, str):
        raise TypeError(f"tokenize: 'text' must be a str; received {describe(text)}")
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class Corpus:
    """A stream of words: ``tokens`` (a list of str, in reading order; sentence and
    line ends are not kept) and, for a generated corpus, ``classes``: planted word ->
    class index (empty for a real text)."""

    name: str
    tokens: list = field(repr=False)
    classes: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"Corpus: 'name' must be a str; received {describe(self.name)}")
        if not isinstance(self.tokens, list) or not all(isinstance(t, str) and t
                                                         for t in self.tokens):
            raise TypeError("Corpus: 'tokens' must be a list of non-empty strings; received "
                            f"{describe(self.tokens)}")
        if not self.tokens:
            raise ValueError(f"Corpus: 'tokens' of {self.name!r} holds no words")
        if not isinstance(self.classes, dict) or not all(
                isinstance(w, str) and is_int(c) for w, c in self.classes.items()):
            raise TypeError("Corpus: 'classes' must map words (str) to class indices (int); "
                            f"received {describe(self.classes)}")

    def __len__(self) -> int:
        return len(self.tokens)


def read_text(path, name: str | None = None) -> Corpus:
    """The words of the UTF-8 text file at ``path`` (:func:`tokenize`d), as a Corpus
    named ``name`` (default: the path). A file that is not UTF-8 or holds no word is a
    ValueError naming the file."""
    path = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as error:
        raise ValueError(f"read_text: {path!r} is not UTF-8 text ({error})") from None
    tokens = tokenize(text)
    if not tokens:
        raise ValueError(f"read_text: {path!r} holds no words (tokenization keeps runs of "
                         f"letters, digits and '_')")
    return Corpus(path if name is None else name, tokens)


def _pseudowords(count: int, rng) -> list[str]:
    """``count`` distinct pronounceable words of two to four consonant-vowel syllables."""
    syllables = np.array([o + v for o in _ONSETS for v in _VOWELS])
    words: dict[str, None] = {}
    while len(words) < count:
        lengths = rng.integers(2, 5, size=count)
        picks = rng.integers(0, len(syllables), size=(count, 4))
        for length, row in zip(lengths, picks):
            words.setdefault("".join(syllables[row[:length]]), None)
    return list(words)[:count]


def int_at_least(op: str, name: str, value, minimum: int) -> int:
    """``value`` as an int, refused (naming ``op`` and ``name``) unless it is an int
    >= ``minimum``: a TypeError for a non-int (a bool or a float), else a ValueError."""
    if not is_int(value):
        raise TypeError(f"{op}: '{name}' must be an int >= {minimum}; received "
                        f"{describe(value)}")
    if value < minimum:
        raise ValueError(f"{op}: '{name}' must be an int >= {minimum}; received {value!r}")
    return int(value)


def planted_corpus(seed=0, classes: int = 8, words_per_class: int = 12,
                   filler_words: int = 30, sentences: int = 12000,
                   sentence_length: int = 10, topic_rate: float = 0.5) -> Corpus:
    """A generated corpus in which words of the same planted class share their contexts.

    Each sentence has a topic, a class drawn uniformly; each of its ``sentence_length``
    words is, with probability ``topic_rate``, a word of the topic's class (uniform
    over the ``words_per_class`` words), else a filler word shared by all topics, drawn
    with Zipf frequencies (``p`` ~ 1 / rank: a few very frequent words, as "the" and
    "of", which subsampling thins). Words of one class thus co-occur with each other
    and with the same fillers, and never with other classes' words inside a sentence,
    so their embeddings should be each other's nearest neighbours. All words are
    pronounceable pseudo-words; ``classes`` maps each class word to its class.

    Deterministic given ``seed`` (an int or a Generator); the default has 120,000
    tokens (a vocabulary of 96 class words and 30 fillers) and takes a few tens of milliseconds.
    """
    op = "planted_corpus"
    rng = as_generator(op, "seed", seed, allow_none=False)
    classes = int_at_least(op, "classes", classes, 2)
    words_per_class = int_at_least(op, "words_per_class", words_per_class, 2)
    filler_words = int_at_least(op, "filler_words", filler_words, 1)
    sentences = int_at_least(op, "sentences", sentences, 1)
    sentence_length = int_at_least(op, "sentence_length", sentence_length, 2)
    if isinstance(topic_rate, bool) or not isinstance(topic_rate, (int, float, np.floating)):
        raise TypeError(f"{op}: 'topic_rate' must be a float in (0, 1]; received "
                        f"{describe(topic_rate)}")
    if not 0 < topic_rate <= 1:
        raise ValueError(f"{op}: 'topic_rate' must be a float in (0, 1]; received "
                         f"{topic_rate!r}")
    n_class_words = classes * words_per_class
    words = np.array(_pseudowords(n_class_words + filler_words, rng))
    topics = rng.integers(0, classes, size=(sentences, 1))
    in_topic = rng.random((sentences, sentence_length)) < topic_rate
    class_words = topics * words_per_class + rng.integers(
        0, words_per_class, size=(sentences, sentence_length))
    zipf = 1.0 / np.arange(1, filler_words + 1)
    fillers = n_class_words + np.searchsorted(
        np.cumsum(zipf / zipf.sum()), rng.random((sentences, sentence_length)), side="right")
    ids = np.where(in_topic, class_words, np.minimum(fillers, len(words) - 1))
    labels = {str(word): i // words_per_class for i, word in enumerate(words[:n_class_words])}
    return Corpus("planted", words[ids.reshape(-1)].tolist(), labels)
