"""K classes in the labeling layer: votes of one of K, Snorkel's LabelModel at cardinality K, K
probabilities per row, the training columns of K classes, and the metrics every gate reads."""

import types

import numpy as np
import pandas as pd
import pytest

from tasks.core.params import load_params
from tasks.core.plugins import DatasetError, _load_plugin, check_labels, class_names
from tasks.evaluation.quality import classification_metrics
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import ABSTAIN
from tasks.labeling.mix import label_columns, training_labels

K = 3


def _votes(y: np.ndarray, accuracy: float, coverage: float, seed: int) -> np.ndarray:
    """An LF that fires on `coverage` of the rows and then says the true class with `accuracy`."""
    rng = np.random.default_rng(seed)
    wrong = (y + rng.integers(1, K, len(y))) % K
    vote = np.where(rng.random(len(y)) < accuracy, y, wrong)
    return np.where(rng.random(len(y)) < coverage, vote, ABSTAIN).astype(np.int8)


def _matrix(y: np.ndarray, seed: int) -> np.ndarray:
    return np.column_stack([_votes(y, acc, 0.6, seed + j) for j, acc in enumerate((0.85, 0.75, 0.7, 0.65, 0.8))])


def test_the_label_model_labels_k_classes_with_a_probability_per_class():
    rng = np.random.default_rng(0)
    y_dev, y = rng.integers(0, K, 300), rng.integers(0, K, 900)
    L, L_dev = _matrix(y, 10), _matrix(y_dev, 20)
    lfs = [types.SimpleNamespace(name=f"lf{j}") for j in range(L.shape[1])]
    out = label_batch(L, L_dev, y_dev, lfs, load_params().weak_label, classes=K)

    covered = (L != ABSTAIN).any(axis=1)
    assert out.prob.shape == (len(y), K)
    assert np.isnan(out.prob[~covered]).all() and (out.label[~covered] == ABSTAIN).all()
    np.testing.assert_allclose(out.prob[covered].sum(axis=1), 1.0, atol=1e-6)
    assert (out.label[covered] == out.prob[covered].argmax(axis=1)).all()
    # five better-than-chance LFs: the weak labels are far above a third right, on every class
    assert (out.label[covered] == y[covered]).mean() > 0.75
    for method in ("label_model", "majority_vote"):
        q = out.quality[method]
        assert q["roc_auc"] > 0.8 and set(q["per_class"]) == {"0", "1", "2"}
    assert [r["polarity"] for r in out.lf_table] == [[0, 1, 2]] * L.shape[1]


def test_the_label_model_refuses_a_gold_label_outside_the_classes():
    rng = np.random.default_rng(1)
    y_dev = rng.integers(0, K, 60)
    L = _matrix(y_dev, 0)
    lfs = [types.SimpleNamespace(name=f"lf{j}") for j in range(L.shape[1])]
    with pytest.raises(ValueError, match=r"gold dev labels \[2\] are outside the 2 classes"):
        label_batch(L, L, y_dev, lfs, load_params().weak_label)


def test_k_class_training_labels_carry_a_target_per_class_gold_rows_one_hot():
    nan = np.nan
    weak = np.array([[0.2, 0.7, 0.1], [nan, nan, nan], [0.5, 0.25, 0.25], [nan, nan, nan]])
    gold = np.array([nan, 2, 1, nan])
    out = training_labels(weak, gold, "weak_plus_gold", 0.4)
    assert (
        list(out.columns)
        == label_columns(K)
        == [
            "label",
            "label_prob_0",
            "label_prob_1",
            "label_prob_2",
            "label_source",
            "label_weight",
        ]
    )
    assert out["label"].tolist() == [1, 2, 1, -1]  # weak: the most probable class; gold wins
    assert out["label_source"].tolist() == ["weak", "gold", "gold", "none"]
    assert out["label_weight"].tolist() == [0.4, 1.0, 1.0, 0.0]
    targets = out[["label_prob_0", "label_prob_1", "label_prob_2"]].to_numpy()
    np.testing.assert_allclose(targets[:3], [[0.2, 0.7, 0.1], [0, 0, 1], [0, 1, 0]])
    assert label_columns(2) == ["label", "label_prob", "label_source", "label_weight"]  # binary: as before


def test_k_class_metrics_are_macro_averages_and_name_a_label_outside_the_classes():
    y = np.array([0, 1, 2, 2, 1, 0])
    perfect = np.eye(K)[y] * 0.8 + 0.2 / K
    m = classification_metrics(y, perfect)
    assert (m["roc_auc"], m["f1"], m["accuracy"], m["n"]) == (1.0, 1.0, 1.0, 6)
    assert m["per_class"]["2"] == {"f1": 1.0, "roc_auc": 1.0, "support": 2}
    # class 2 predicted as 1 everywhere: its F1 is 0, class 1's precision halves
    swapped = perfect.copy()
    swapped[y == 2] = [0.1, 0.8, 0.1]
    m = classification_metrics(y, swapped)
    assert m["per_class"]["2"]["f1"] == 0.0 and m["f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert np.isnan(classification_metrics(np.array([0, 1, 1]), perfect[:3])["roc_auc"])  # class 2 absent
    with pytest.raises(ValueError, match=r"labels \[3\] are outside the 3 classes"):
        classification_metrics(np.array([0, 1, 3]), perfect[:3])


def test_a_dataset_names_its_classes_and_a_gold_label_outside_them_is_refused(monkeypatch):
    emails = _load_plugin("tasks.plugins.emails")
    assert class_names(emails) == ("ham", "spam")
    with pytest.raises(DatasetError, match=r"label\(s\) \['2', '7'\] outside dataset emails's 2 classes"):
        check_labels(emails, pd.Series([0, 1, 2, 7]), "gold dev set")
    check_labels(emails, np.array([0, 1, 1]), "gold dev set")

    bad = types.ModuleType("sluice_bad_classes")
    for name in ("NAME", "ID_COLUMN", "TIME_COLUMN", "GOLD_COLUMN", "RAW_COLUMNS", "FEATURE_NAMES"):
        setattr(bad, name, name)
    for name in ("featurize", "load_source", "LF_MODULE", "RAW_CONTRACT", "LABELED_CONTRACT"):
        setattr(bad, name, name)
    bad.CLASS_NAMES = ("a", "a", "b")
    monkeypatch.setitem(__import__("sys").modules, "sluice_bad_classes", bad)
    with pytest.raises(DatasetError, match="CLASS_NAMES must be a tuple of two or more distinct"):
        _load_plugin("sluice_bad_classes")


def test_the_compress_gate_holds_each_class_to_its_floor():
    """A candidate whose macro ROC AUC keeps the floor but whose class 2 falls below it is refused, naming
    the class."""
    from tasks.compression.search import quality_shortfalls

    rng = np.random.default_rng(3)
    y = rng.integers(0, K, 600)
    base = np.eye(K)[y] * 0.6 + rng.random((600, K)) * 0.4
    worse = base.copy()
    worse[:, 2] = rng.random(600)  # class 2's score now says nothing
    base, worse = base / base.sum(1, keepdims=True), worse / worse.sum(1, keepdims=True)
    ref = {"overall": classification_metrics(y, base), "slices": {}}
    row = {"overall": classification_metrics(y, worse), "slices": {}}
    out = quality_shortfalls(row, ref, 0.85)  # macro 0.90 keeps it; class 2, 0.78, does not
    assert [w.split(":")[0] for w in out] == ["class 2"], out
    assert quality_shortfalls(ref, ref, 0.99) == []
