"""word2vec's files: the text format of the vectors (``V D``, then ``word v1 ... vD``
per line, as gensim's ``KeyedVectors.load_word2vec_format(path)`` reads it), and the
whole model as one safetensors file (tables as tensors; configuration, vocabulary,
history and generator state as JSON metadata)."""

from __future__ import annotations

import json

import numpy as np

from .._checks import describe, float_dtype
from ..io import document
from ..io import safetensors as st

#: Significant digits that read back to the same binary value.
DIGITS = {np.dtype(np.float32): 9, np.dtype(np.float64): 17}
METADATA_KEY = "handgrad.word2vec"
FORMAT_VERSION = 1
TABLE_NAMES = ("input", "output", "bias")
HISTORY_KEYS = ("loss", "words_per_second", "seconds")


def write_vectors(path, words, vectors) -> None:
    """``V D``, then ``word v1 ... vD`` per row of ``vectors`` (V, D), in UTF-8."""
    for word in words:
        if not word or any(ch.isspace() for ch in word):
            raise ValueError(f"save_word2vec_format: the word {word!r} is empty or holds "
                             f"white space, which the text format cannot store")
    rows, dim = vectors.shape
    row_format = " ".join([f"%.{DIGITS[vectors.dtype]}g"] * dim)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(f"{rows} {dim}\n")
        for word, row in zip(words, vectors.tolist()):
            f.write(f"{word} {row_format % tuple(row)}\n")


def load_word2vec_format(path, dtype="float32"):
    """``(words, vectors)`` from a word2vec text file: a list of V words and a (V, D)
    array of ``dtype``. A malformed file is a ValueError naming the file and line."""
    dtype = float_dtype("load_word2vec_format", "dtype", dtype, allow_none=False)
    where = f"load_word2vec_format: {str(path)!r}"
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    header = lines[0].split() if lines else []
    if len(header) != 2 or not all(part.isdigit() for part in header):
        raise ValueError(f"{where}: line 1 must be 'V D' (two integers); received "
                         f"{lines[0] if lines else ''!r}")
    rows, dim = int(header[0]), int(header[1])
    body = [line for line in lines[1:] if line.strip()]
    if len(body) != rows:
        raise ValueError(f"{where}: the header announces {rows} vectors; the file holds "
                         f"{len(body)}")
    words, values = [], []
    for number, line in enumerate(body, start=2):
        parts = line.split()
        if len(parts) != dim + 1:
            raise ValueError(f"{where}: line {number} must hold a word and {dim} numbers; "
                             f"it holds {len(parts)} fields")
        words.append(parts[0])
        try:
            values.append([float(v) for v in parts[1:]])
        except ValueError:
            raise ValueError(f"{where}: line {number} holds a value that is not a number"
                             ) from None
    return words, np.array(values, dtype=dtype).reshape(rows, dim)


# --------------------------------------------------------------- the whole model


def write_model(path, model) -> None:
    """The model's tables, counts and document (see the module) as a safetensors file."""
    document_ = {"format_version": FORMAT_VERSION, "config": model.config(),
                 "vocabulary": model.vocabulary, "history": model.history,
                 "rng": document.jsonable(model.rng.bit_generator.state)}
    st.write(path, {**model.tables, "counts": model.counts},
             {METADATA_KEY: json.dumps(document_, ensure_ascii=False)})


def _field(where, name, value, check, expected):
    if not check(value):
        raise ValueError(f"{where}: field {name!r} must be {expected}; received "
                         f"{describe(value)}")
    return value


def _read_config(where, config, check_config):
    _field(where, "config", config, lambda c: isinstance(c, dict), "an object")
    try:
        return check_config(config)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: field 'config' is not a valid Word2Vec configuration: "
                         f"{error}") from None


def _read_tables(where, tensors, config, size):
    names = [*TABLE_NAMES[:2], *(["bias"] if config["objective"] == "nce" else []), "counts"]
    if sorted(tensors) != sorted(names):
        raise ValueError(f"{where}: the tensors must be {sorted(names)}; received "
                         f"{sorted(tensors)}")
    dtype = np.dtype(config["dtype"])
    for name in names[:-1]:
        shape = (size, config["dim"]) if name != "bias" else (size,)
        if tensors[name].shape != shape or tensors[name].dtype != dtype:
            raise ValueError(f"{where}: tensor {name!r} must have shape {shape} and dtype "
                             f"{dtype}; received {describe(tensors[name])}")
    counts = tensors.pop("counts")
    if counts.shape != (size,) or counts.dtype != np.int64 or (counts < 1).any():
        raise ValueError(f"{where}: tensor 'counts' must be {size} int64 counts >= 1; "
                         f"received {describe(counts)}")
    return tensors, counts


def read_model(path, check_config):
    """``(config, rng, vocabulary, counts, tables, history)`` from a file of
    :func:`write_model`, every field checked; ``check_config(config)`` returns the
    configuration or raises TypeError/ValueError (the model class checks its own)."""
    where = f"word2vec model file {str(path)!r}"
    tensors, metadata = st.read(path)
    if METADATA_KEY not in metadata:
        raise ValueError(f"{where} is not a word2vec model (no {METADATA_KEY!r} metadata)")
    doc = st.loads_unique(metadata[METADATA_KEY], where)
    keys = {"format_version", "config", "vocabulary", "history", "rng"}
    _field(where, "document", doc, lambda d: isinstance(d, dict) and set(d) == keys,
           f"an object with the keys {sorted(keys)}")
    _field(where, "format_version", doc["format_version"], lambda v: v == FORMAT_VERSION,
           str(FORMAT_VERSION))
    config = _read_config(where, doc["config"], check_config)
    words = _field(where, "vocabulary", doc["vocabulary"],
                   lambda v: isinstance(v, list) and len(v) >= 2 and len(set(v)) == len(v)
                   and all(isinstance(w, str) and w for w in v),
                   "a list of at least 2 distinct non-empty strings")
    history = _field(where, "history", doc["history"],
                     lambda h: isinstance(h, dict) and set(h) == set(HISTORY_KEYS) and all(
                         isinstance(h[k], list) and all(
                             isinstance(v, (int, float)) and not isinstance(v, bool)
                             for v in h[k]) for k in HISTORY_KEYS),
                     f"an object of number lists {list(HISTORY_KEYS)}")
    rng = document.generator(where, "rng", doc["rng"])
    tables, counts = _read_tables(where, tensors, config, len(words))
    return config, rng, words, counts, tables, {k: list(history[k]) for k in HISTORY_KEYS}

