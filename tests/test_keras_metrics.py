"""Keras's streaming metrics (handgrad.metrics) against scikit-learn and NumPy references.

Keras semantics relied on (Keras is not a dependency; written down here):
- Precision/Recall accumulate tp, fp, fn over batches; an entry is a predicted positive
  when ``y_pred > threshold`` (0.5) and a true one when ``y_true != 0``; the result is
  computed once from the counts (0 when the denominator is 0).
- AUC (num_thresholds=200, summation_method="interpolation") counts tp/fp/tn/fn at
  thresholds ``[-1e-7, 1/199, ..., 198/199, 1 + 1e-7]``; ROC is the trapezoid rule on
  (fpr, tpr); PR is Davis & Goadrich's interpolation, in which tp is linear in the
  predicted positives between two thresholds and precision is integrated over recall.
- TopKCategoricalAccuracy: the true class among the k (default 5) highest scores.
- BinaryAccuracy: mean of ``(y_pred > threshold) == y_true``.
- MeanIoU: mean over classes present (in targets or predictions) of tp / (tp + fp + fn)
  of the accumulated confusion matrix.
- A callable ``fn(y_true, y_pred)`` is wrapped in MeanMetricWrapper: the mean over examples.
- Metrics reset at each epoch and at each evaluate; logs use the metric's name, ``val_``
  for the validation data.
- On a logits model handgrad hands the thresholding metrics ``sigmoid(logits)``.
"""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import metrics as M
from handgrad import optimizers
from handgrad.model import Sequential
from handgrad.testing import assert_close

sklearn_metrics = pytest.importorskip("sklearn.metrics")
integrate = pytest.importorskip("scipy.integrate")

CUTS = (7, 57, 58)  # uneven batches: 7, 50, 1 and the rest


def stream(metric, y_true, y_pred, cuts=CUTS):
    """The metric's result after feeding the data in batches cut at ``cuts``."""
    metric.reset_state()
    edges = (0, *cuts, len(y_pred))
    for lo, hi in itertools.pairwise(edges):
        metric.update_state(y_true[lo:hi], y_pred[lo:hi])
    return metric.result()


def whole(metric, y_true, y_pred):
    return stream(metric, y_true, y_pred, cuts=())


def binary_data(seed=0, n=100, columns=1):
    rng = np.random.default_rng(seed)
    y = (rng.random((n, columns)) < 0.4).astype(np.float64)
    p = np.clip(0.35 * y + 0.65 * rng.random((n, columns)), 0, 1)
    return y, p


@pytest.mark.parametrize("threshold", [0.5, 0.3])
def test_precision_and_recall_match_sklearn_over_uneven_batches(threshold):
    y, p = binary_data(columns=3)
    said = (p > threshold).ravel()
    for metric, reference in ((M.Precision(thresholds=threshold), sklearn_metrics.precision_score),
                              (M.Recall(thresholds=threshold), sklearn_metrics.recall_score)):
        expected = reference(y.ravel(), said)
        assert_close(stream(metric, y, p), expected, terms=len(y))
        assert_close(whole(metric, y, p), expected, terms=len(y))


def test_precision_class_id_keeps_one_column():
    y, p = binary_data(columns=3, seed=1)
    expected = sklearn_metrics.precision_score(y[:, 2], p[:, 2] > 0.5)
    assert_close(stream(M.Precision(class_id=2), y, p), expected, terms=len(y))


def reference_counts(y, p, num_thresholds=200):
    """tp, fp, tn, fn at Keras's thresholds, one threshold at a time."""
    thresholds = [-1e-7] + [i / (num_thresholds - 1) for i in range(1, num_thresholds - 1)] \
        + [1 + 1e-7]
    pos, neg = p[y != 0], p[y == 0]
    tp = np.array([np.sum(pos > t) for t in thresholds], dtype=np.float64)
    fp = np.array([np.sum(neg > t) for t in thresholds], dtype=np.float64)
    return tp, fp, len(neg) - fp, len(pos) - tp


def reference_roc(y, p):
    tp, fp, tn, fn = reference_counts(y, p)
    return float(np.trapezoid((tp / (tp + fn))[::-1], (fp / (fp + tn))[::-1]))


def reference_pr(y, p):
    """The area under Davis & Goadrich's interpolated curve by numerical integration: on
    each piece tp = s * P + b, precision = tp / P, recall = tp / positives."""
    tp, fp, _, fn = reference_counts(y, p)
    predicted, positives, area = tp + fp, tp[0] + fn[0], 0.0
    for i in range(len(tp) - 1):
        dp = predicted[i] - predicted[i + 1]
        if dp <= 0:
            continue
        s = (tp[i] - tp[i + 1]) / dp
        b = tp[i + 1] - s * predicted[i + 1]
        piece, _ = integrate.quad(lambda q, s=s, b=b: (s + b / q) * s / positives,
                                  predicted[i + 1], predicted[i], epsabs=1e-13, epsrel=1e-12)
        area += piece
    return area


def test_auc_roc_equals_the_numpy_reference_and_sklearn_within_the_binning():
    y, p = binary_data(seed=2)
    auc = stream(M.AUC(), y, p)
    assert_close(auc, reference_roc(y, p), terms=200)
    # binned trapezoids count a (positive, negative) pair in one bin as 1/2: the exact AUC
    # differs by at most half the share of such pairs
    bins = np.digitize(p.ravel(), np.arange(1, 199) / 199)
    pos, neg = bins[y.ravel() != 0], bins[y.ravel() == 0]
    same = np.sum(pos[:, None] == neg[None, :]) / (len(pos) * len(neg))
    exact = sklearn_metrics.roc_auc_score(y.ravel(), p.ravel())
    assert abs(auc - exact) <= 0.5 * same + 1e-12
    assert auc != pytest.approx(exact, abs=1e-9)  # the data do share bins: a real bound


def test_auc_pr_equals_the_integrated_interpolation():
    y, p = binary_data(seed=3)
    auc = stream(M.AUC(curve="PR"), y, p)
    assert_close(auc, reference_pr(y, p), terms=200)


def test_auc_with_one_example_per_bin_brackets_sklearn():
    """Scores at the middle of distinct bins: ROC is exact; each positive's PR piece lies
    between the precision before it and sklearn's average-precision term tp / p."""
    rng = np.random.default_rng(4)
    bins = rng.choice(199, size=150, replace=False)
    p = (bins + 0.5) / 199
    y = (rng.random(150) < 0.5 + 0.3 * (p - 0.5)).astype(np.float64)
    assert_close(stream(M.AUC(), y, p), sklearn_metrics.roc_auc_score(y, p), terms=200)
    order = np.argsort(-p)
    tp = np.cumsum(y[order])
    k = np.arange(1, 151)
    hit = y[order] == 1
    before = np.where(k > 1, (tp - 1) / np.maximum(k - 1, 1), 1.0)
    slack = np.sum((tp / k - before)[hit]) / tp[-1]
    average_precision = sklearn_metrics.average_precision_score(y, p)
    pr = stream(M.AUC(curve="PR"), y, p)
    assert average_precision - slack - 1e-12 <= pr <= average_precision + 1e-12


@pytest.mark.parametrize("k", [5, 2])
def test_top_k_accuracies_match_sklearn(k):
    rng = np.random.default_rng(5)
    scores, ids = rng.normal(size=(100, 10)), rng.integers(0, 10, size=100)
    expected = sklearn_metrics.top_k_accuracy_score(ids, scores, k=k, labels=np.arange(10))
    sparse = M.SparseTopKCategoricalAccuracy(k=k)
    assert_close(stream(sparse, ids, scores), expected, terms=100)
    assert_close(stream(sparse, ids[:, None], scores), expected, terms=100)
    assert_close(stream(M.TopKCategoricalAccuracy(k=k), np.eye(10)[ids], scores), expected,
                 terms=100)
    assert M.TopKCategoricalAccuracy().k == 5


def test_binary_accuracy_matches_sklearn():
    y, p = binary_data(seed=6, columns=4)
    for threshold in (0.5, 0.7):
        expected = sklearn_metrics.accuracy_score(y.ravel(), p.ravel() > threshold)
        assert_close(stream(M.BinaryAccuracy(threshold=threshold), y, p), expected, terms=400)


def test_mean_iou_matches_sklearn_jaccard():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 4, size=(100, 3))  # class 4 of 5 never appears: left out
    scores = rng.normal(size=(100, 3, 5)) + 2 * np.eye(5)[y]
    scores[..., 4] = -10
    pred = scores.argmax(-1)
    expected = sklearn_metrics.jaccard_score(y.ravel(), pred.ravel(), average="macro")
    assert_close(stream(M.MeanIoU(5), y, scores), expected, terms=300)
    assert_close(stream(M.MeanIoU(num_classes=5), y, pred), expected, terms=300)


def test_callable_is_averaged_over_examples():
    rng = np.random.default_rng(8)
    y, p = rng.normal(size=(100, 2)), rng.normal(size=(100, 2))

    def squared(y_true, y_pred):  # one value per example
        return np.mean((y_true - y_pred) ** 2, axis=-1)

    def batch_mean(y_true, y_pred):  # one number per batch
        return float(np.mean(np.abs(y_true - y_pred)))

    assert_close(stream(M.MeanMetricWrapper(squared), y, p), np.mean((y - p) ** 2), terms=200)
    assert_close(stream(M.MeanMetricWrapper(batch_mean), y, p), np.mean(np.abs(y - p)),
                 terms=200)


# --------------------------------------------------------------------- fit / evaluate


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def logits_model(lr=0.0):
    model = Sequential([L.Dense(1, dtype="float64")], input_shape=(4,), seed=0)

    def positives(y_true, y_pred):
        return np.mean(y_true)

    model.compile(optimizers.SGD(lr=lr), "binary_cross_entropy_with_logits",
                  metrics=["precision", "recall", "auc", M.AUC(curve="PR", name="pr_auc"),
                           positives])
    return model


def classification_data(seed=9, n=100):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    y = (x[:, :1] + 0.8 * rng.normal(size=(n, 1)) > 0).astype(np.float64)
    return x, y


def test_fit_and_evaluate_log_the_whole_set_figures_under_keras_names():
    x, y = classification_data()
    xv, yv = classification_data(seed=10, n=37)
    model = logits_model(lr=0.0)  # the weights stay: every batch sees one model
    history = model.fit(x, y, epochs=2, batch_size=32, validation_data=(xv, yv), verbose=0,
                        rng=0).history
    for data, prefix in (((x, y), ""), ((xv, yv), "val_")):
        xs, ys = data
        p = sigmoid(model.predict(xs))
        expected = {"precision": sklearn_metrics.precision_score(ys.ravel(), p.ravel() > 0.5),
                    "recall": sklearn_metrics.recall_score(ys.ravel(), p.ravel() > 0.5),
                    "auc": reference_roc(ys, p), "pr_auc": reference_pr(ys, p),
                    "positives": float(np.mean(ys))}
        for key, value in expected.items():
            assert_close(history[prefix + key][-1], value, terms=len(ys), what=prefix + key)
    logs = model.evaluate(xv, yv, return_dict=True)
    assert list(logs) == ["loss", "precision", "recall", "auc", "pr_auc", "positives"]
    assert_close(logs["auc"], history["val_auc"][-1], terms=200)


def test_evaluate_resets_the_counts():
    x, y = classification_data()
    model = logits_model()
    first = model.evaluate(x[:50], y[:50], batch_size=16, return_dict=True)
    second = model.evaluate(x[50:], y[50:], batch_size=16, return_dict=True)
    p = sigmoid(model.predict(x[50:]))
    assert_close(second["auc"], reference_roc(y[50:], p), terms=200)
    assert first["auc"] != second["auc"]


def test_compile_measures_with_a_copy_of_the_metric_object():
    x, y = classification_data()
    model = logits_model()
    metric = M.Precision()
    model.compile("sgd", "binary_cross_entropy_with_logits", metrics=[metric])
    model.evaluate(x, y)
    assert metric.result() == 0.0  # compile measures with its own copy


def test_metric_objects_are_saved_by_class_and_config(tmp_path):
    # Keras saves a compiled model's metric objects by their config; handgrad likewise
    # names each handgrad.metrics class and its options (no registration needed)
    from handgrad import io as hio

    x, y = classification_data()
    model = Sequential([L.Dense(1, dtype="float64")], input_shape=(4,), seed=0)
    model.compile("sgd", "binary_cross_entropy_with_logits",
                  metrics=[M.Precision(thresholds=0.3), M.AUC(curve="PR"),
                           M.BinaryAccuracy(threshold=0.7, name="acc70")])
    path = tmp_path / "model.hg"
    hio.save(model, path)
    loaded = hio.load(path)
    got = loaded.evaluate(x, y, batch_size=16, return_dict=True)
    assert got == model.evaluate(x, y, batch_size=16, return_dict=True)
    assert list(got) == ["loss", "precision", "auc", "acc70"]
    p = sigmoid(model.predict(x))
    assert_close(got["precision"], sklearn_metrics.precision_score(y.ravel(), p.ravel() > 0.3),
                 terms=len(y), what="precision at 0.3 after loading")
    assert_close(got["auc"], reference_pr(y, p), terms=200, what="PR AUC after loading")


# ---------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize("make, message", [
    (lambda: M.TopKCategoricalAccuracy(k=0), "'k' must be an int >= 1"),
    (lambda: M.SparseTopKCategoricalAccuracy(k=2.5), "'k' must be an int >= 1"),
    (lambda: M.Precision(thresholds=1.5), "'thresholds' must be a number in \\[0, 1\\]"),
    (lambda: M.Recall(thresholds=-0.1), "'thresholds' must be a number in \\[0, 1\\]"),
    (lambda: M.BinaryAccuracy(threshold=2), "'threshold' must be a number in \\[0, 1\\]"),
    (lambda: M.AUC(thresholds=[0.2, 1.2]), "'thresholds\\[1\\]' must be a number in"),
    (lambda: M.AUC(num_thresholds=1), "'num_thresholds' must be an int >= 2"),
    (lambda: M.AUC(curve="roc_curve"), "'curve' must be one of"),
    (lambda: M.AUC(summation_method="minoring"), "'summation_method' must be"),
    (lambda: M.MeanIoU(0), "'num_classes' must be an int >= 1"),
    (lambda: M.MeanIoU(num_classes=None), "'num_classes' must be an int >= 1"),
])
def test_bad_arguments_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_bad_data_and_names_are_named():
    y, p = binary_data()
    with pytest.raises(ValueError, match="'y_pred' must hold probabilities in \\[0, 1\\]"):
        M.AUC().update_state(y, p * 3)
    with pytest.raises(ValueError, match="'y_true' must have the shape of 'y_pred'"):
        M.Precision().update_state(y[:, 0], p)
    with pytest.raises(ValueError, match="'y_true' ids must lie in \\[0, 10\\)"):
        M.SparseTopKCategoricalAccuracy().update_state(np.array([10]), np.zeros((1, 10)))
    with pytest.raises(ValueError, match="labels of the shape of 'y_true'"):
        M.MeanIoU(3).update_state(np.array([0, 1]), np.zeros((2, 4)))
    model = Sequential([L.Dense(1)], input_shape=(4,))
    with pytest.raises(ValueError, match="two metrics are named 'auc'"):
        model.compile("sgd", "binary_cross_entropy_with_logits", metrics=["auc", M.AUC()])
    with pytest.raises(ValueError, match=r"a metric object .* or a callable"):
        model.compile("sgd", "binary_cross_entropy_with_logits", metrics=["aucc"])


def test_import_handgrad_gives_the_metrics_module():
    """``import handgrad as hg; hg.metrics.AUC()`` as Keras's ``keras.metrics.AUC()``, in a
    fresh interpreter (where nothing else has imported ``handgrad.metrics``)."""
    code = "import handgrad as hg; print(type(hg.metrics.AUC()).__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "AUC"
