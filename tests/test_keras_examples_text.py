"""Keras's text classification examples (keras.io/examples/nlp/text_classification_from_scratch
for the TextVectorization pipeline, .../nlp/bidirectional_lstm_imdb for the model), line for
line, on generated reviews: pseudo-words of the built-in planted corpus, class 0 "positive",
class 1 "negative", the other classes neutral; a review of 4..12 words carries one or three
sentiment words at distinct places, and is positive (1) when most of them are.

Keras semantics relied on (Keras is not a dependency; each is checked below):

- ``TextVectorization.adapt``: index 0 the padding token ``""``, 1 ``"[UNK]"``, then the
  tokens by descending count, ties by descending token, cut to ``max_tokens`` in all; with
  ``output_sequence_length`` the ids are padded with 0 at the end;
- ``Embedding(mask_zero=True)`` masks the id-0 steps and the LSTM skips them: the forward
  direction's result is its state after the last real word, the backward direction starts
  at the last real word; a padded review predicts exactly as the unpadded one;
- ``"binary_crossentropy"`` takes probabilities (the sigmoid's), clipped to
  ``[1e-7, 1 - 1e-7]``, averaged over the examples;
- ``keras.metrics.Precision()`` streams true and false positives over the batches at
  threshold 0.5 (``y_pred > 0.5``) and reports ``TP / (TP + FP)``; ``AUC()`` is the ROC AUC
  over 200 thresholds.

Differences from the Keras scripts, written down:

- handgrad's ``LSTM`` returns sequences by default (torch's default); Keras's
  ``LSTM(64)`` returns the last output: here ``LSTM(16, return_sequences=False)``;
- handgrad's LSTM has torch's two biases (``b_ih``, ``b_hh``), so it has ``4 * units`` more
  parameters per direction than Keras's one-bias LSTM (the function is the same);
- ``binary_crossentropy`` wants targets of the output's shape (N, 1); Keras also takes
  labels of shape (N,) for a (N, 1) output: here ``y[:, None]``;
- a layer called on arrays builds a graph in handgrad; Keras's ``vectorize_layer(text)``
  is ``vectorize_layer.forward(text, training=False)`` here;
- ``handgrad.metrics`` is imported by name (``import handgrad`` does not import it);
- sizes (16-dim embeddings, 16 units, 6 epochs) are test-sized.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers, metrics
from handgrad.data import planted_corpus
from handgrad.testing import assert_close

max_features = 200  # the vocabulary cap, "" and "[UNK]" included
sequence_length = 16
N_TRAIN, N_VAL = 2000, 400
THRESHOLD = 0.9  # validation accuracy and AUC the run reaches


def reviews(n, seed=0):
    """``n`` generated reviews and their labels (float32 0/1, see the module)."""
    words = {}
    for word, cls in planted_corpus(seed=0).classes.items():
        words.setdefault(min(cls, 2), []).append(word)
    positive, negative, neutral = words[0], words[1], words[2]
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(n):
        length, marks = int(rng.integers(4, 13)), int(rng.choice([1, 3]))
        review = list(rng.choice(neutral, length))
        n_pos = int(rng.integers(0, marks + 1))
        places = rng.choice(length, marks, replace=False)
        for i, place in enumerate(places):
            review[place] = rng.choice(positive if i < n_pos else negative)
        texts.append(" ".join(review))
        labels.append(float(n_pos > marks - n_pos))
    return np.array(texts), np.array(labels, dtype=np.float32)


@pytest.fixture(scope="module")
def example():
    texts, labels = reviews(N_TRAIN + N_VAL)
    train_text, val_text = texts[:N_TRAIN], texts[N_TRAIN:]
    y_train, y_val = labels[:N_TRAIN, None], labels[N_TRAIN:, None]

    vectorize_layer = layers.TextVectorization(
        max_tokens=max_features, output_mode="int", output_sequence_length=sequence_length)
    vectorize_layer.adapt(train_text)
    x_train = vectorize_layer.forward(train_text, training=False)
    x_val = vectorize_layer.forward(val_text, training=False)

    inputs = hg.Input(shape=(None,), dtype="int64")
    x = layers.Embedding(max_features, 16, mask_zero=True)(inputs)
    x = layers.Bidirectional(layers.LSTM(16, return_sequences=False))(x)
    outputs = layers.Dense(1, activation="sigmoid")(x)
    model = hg.Model(inputs, outputs, seed=0)

    model.compile("adam", "binary_crossentropy",
                  metrics=["accuracy", metrics.AUC(), metrics.Precision()])
    history = model.fit(x_train, y_train, batch_size=32, epochs=6,
                        validation_data=(x_val, y_val), verbose=0, rng=0)
    return {"model": model, "history": history.history, "vectorize_layer": vectorize_layer,
            "train_text": train_text, "x_val": x_val, "y_val": y_val}


def test_vocabulary_is_keras_order(example):
    layer, train_text = example["vectorize_layer"], example["train_text"]
    counts = Counter(word for text in train_text for word in text.split())
    ranked = sorted(counts, key=lambda word: (counts[word], word), reverse=True)
    expected = ["", "[UNK]", *ranked][:max_features]
    assert layer.get_vocabulary() == expected
    ids = layer.forward(np.array([train_text[0], "zzz " + train_text[0]]), training=False)
    words = train_text[0].split()
    assert ids.shape == (2, sequence_length)
    np.testing.assert_array_equal(ids[0, :len(words)], [expected.index(w) for w in words])
    assert not ids[0, len(words):].any()  # padded with 0 at the end
    assert ids[1, 0] == 1  # an unknown word is "[UNK]"


def test_reaches_the_threshold_with_keras_metrics(example):
    history = example["history"]
    assert history["val_accuracy"][-1] >= THRESHOLD, history
    assert history["val_auc"][-1] >= THRESHOLD, history
    assert history["loss"][-1] < history["loss"][0]


def test_loss_and_precision_are_keras(example):
    model, x_val, y_val = example["model"], example["x_val"], example["y_val"]
    probs = model.predict(x_val)
    assert probs.shape == y_val.shape
    history = example["history"]
    clipped = np.clip(probs.astype(np.float64), 1e-7, 1 - 1e-7)
    expected = float(np.mean(-(y_val * np.log(clipped) + (1 - y_val) * np.log1p(-clipped))))
    assert_close(history["val_loss"][-1], expected, dtype=np.float32, terms=len(x_val),
                 what="val_loss")
    predicted = probs[:, 0] > 0.5
    truth = y_val[:, 0] == 1
    true_pos, false_pos = np.sum(predicted & truth), np.sum(predicted & ~truth)
    assert_close(history["val_precision"][-1], true_pos / (true_pos + false_pos),
                 dtype=np.float32, what="val_precision")
    assert history["val_accuracy"][-1] == np.mean(predicted == truth)


def test_masked_padding_does_not_change_the_prediction(example):
    model, x_val = example["model"], example["x_val"]
    lengths = (x_val != 0).sum(axis=1)
    for i in np.flatnonzero(lengths < sequence_length)[:5]:
        padded, unpadded = x_val[i:i + 1], x_val[i:i + 1, :lengths[i]]
        assert_close(model.predict(padded), model.predict(unpadded), terms=lengths[i],
                     what="padded vs unpadded")
    # the check can fail: the same review with its padding read as words (id 1, "[UNK]")
    # predicts differently
    i = int(np.argmin(lengths))
    unknown = np.where(x_val[i:i + 1] == 0, 1, x_val[i:i + 1])
    assert abs(float(model.predict(unknown)[0, 0] - model.predict(x_val[i:i + 1])[0, 0])) > 1e-4


def test_parameter_counts_against_keras(example):
    model = example["model"]
    embedding, bidirectional, dense = (layer for layer in model.layers
                                       if layer.count_params())
    units, dim = 16, 16
    keras_lstm = 4 * units * (dim + units) + 4 * units  # kernel, recurrent kernel, one bias
    assert embedding.count_params() == max_features * dim
    assert bidirectional.count_params() == 2 * (keras_lstm + 4 * units)  # torch's second bias
    assert dense.count_params() == 2 * units + 1
