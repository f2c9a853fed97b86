"""What the end model trains on: gold where it exists, weak labels weighted elsewhere, never the test set."""

import numpy as np
import pandas as pd
import pytest
import torch

from tasks.core.params import load_params
from tasks.labeling.mix import gold_budget_mask, hold_out, label_counts, replayed_gold, training_labels
from tasks.plugins import mlp
from tasks.training.loop import fit_in_memory

NAN = np.nan


def test_gold_wins_weak_rows_carry_their_probability_and_weight():
    weak = np.array([0.9, 0.2, NAN, 0.7, NAN])
    gold = np.array([0.0, NAN, 1.0, NAN, NAN])
    out = training_labels(weak, gold, "weak_plus_gold", 0.3)
    assert out["label_source"].tolist() == ["gold", "weak", "gold", "weak", "none"]
    assert out["label"].tolist() == [0, 0, 1, 1, -1]  # gold 0 beats the weak 0.9
    np.testing.assert_allclose(out["label_prob"].to_numpy()[:4], [0.0, 0.2, 1.0, 0.7])
    assert out["label_weight"].tolist() == [1.0, 0.3, 1.0, 0.3, 0.0]
    counts = label_counts(out)
    assert counts["gold"] == {"rows": 2, "training_rows": 2, "weight": 2.0}
    assert counts["weak"]["training_rows"] == 2 and counts["weak"]["weight"] == pytest.approx(0.6)
    assert counts["none"] == {"rows": 1, "training_rows": 0, "weight": 0.0}


def test_the_mix_option_chooses_what_trains():
    weak, gold = np.array([0.9, 0.2, NAN]), np.array([0.0, NAN, 1.0])
    weak_only = training_labels(weak, gold, "weak_only", 1.0)  # gold ignored, as before it existed
    assert weak_only["label_source"].tolist() == ["weak", "weak", "none"]
    assert weak_only["label"].tolist() == [1, 0, -1] and weak_only["label_weight"].tolist() == [1.0, 1.0, 0.0]
    gold_only = training_labels(weak, gold, "gold_only", 1.0)  # weak rows kept for the record, weight 0
    assert gold_only["label_source"].tolist() == ["gold", "weak", "gold"]
    assert gold_only["label_weight"].tolist() == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="mix must be one of"):
        training_labels(weak, gold, "both", 1.0)
    with pytest.raises(ValueError, match="weak weight must be in"):
        training_labels(weak, gold, "weak_plus_gold", 1.5)


def test_gold_budget_draws_are_seeded_per_row_not_per_batch():
    ids = np.arange(20_000)
    mask = gold_budget_mask(ids, 0.05, seed=7)
    assert 0.04 < mask.mean() < 0.06
    # The same row is drawn the same whichever batch it arrives in, and on a re-run.
    assert (gold_budget_mask(ids[5000:6000], 0.05, 7) == mask[5000:6000]).all()
    assert (gold_budget_mask(ids, 0.05, 8) != mask).any()
    assert not gold_budget_mask(ids, 0.0, 7).any() and gold_budget_mask(ids, 1.0, 7).all()


def test_gold_is_replayed_from_the_source_never_for_the_test_set(emails, params):
    from tasks.datasets import load_dataset
    from tasks.datasets.demo_feed import split_demo

    ds = load_dataset("tasks.plugins.emails")
    dev, test, batches = split_demo(emails, params.demo, ds)
    test_ids = set(test[ds.ID_COLUMN])
    assert not any(b[ds.ID_COLUMN].isin(test_ids).any() for b in batches)  # the demo feed never replays them
    batch = batches[0]
    gold = replayed_gold(batch, ds, 0.2, 7, np.zeros(len(batch), bool))
    has = ~np.isnan(gold)
    assert 0.1 < has.mean() < 0.3
    truth = emails.set_index(ds.ID_COLUMN).loc[batch.loc[has, ds.ID_COLUMN], ds.GOLD_COLUMN].to_numpy()
    assert (gold[has] == truth).all()
    # A landing batch carrying test rows: even at a budget of every row, they get no gold label, and
    # hold_out keeps them out of training altogether (weight 0), whatever the LFs said.
    leaky = pd.concat([batch, test.drop(columns=[ds.GOLD_COLUMN]).iloc[:30]], ignore_index=True)
    held = leaky[ds.ID_COLUMN].isin(test_ids).to_numpy()
    gold = replayed_gold(leaky, ds, 1.0, 7, held)
    assert held.sum() == 30 and np.isnan(gold[held]).all() and not np.isnan(gold[~held]).any()
    labels = hold_out(training_labels(np.full(len(leaky), 0.8), gold, "weak_plus_gold", 1.0), held)
    assert (labels.loc[held, "label_weight"] == 0).all() and (labels.loc[held, "label_source"] == "none").all()
    assert (labels.loc[~held, "label_source"] == "gold").all()


def test_noise_aware_loss_weights_rows_and_equals_plain_bce_at_weight_one():
    logits, target = torch.tensor([2.0, -1.0, 0.5]), torch.tensor([1.0, 0.2, 0.0])
    loss = mlp.loss((0.75, 0.25))
    plain = torch.nn.BCEWithLogitsLoss(reduction="sum", pos_weight=torch.tensor(3.0))(logits, target)
    assert torch.equal(loss(logits, target), plain)
    assert torch.equal(loss(logits, torch.stack([target, torch.ones(3)], 1)), plain)
    weighted = loss(logits, torch.stack([target, torch.tensor([1.0, 0.5, 0.0])], 1))
    per_row = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, target, reduction="none", pos_weight=torch.tensor(3.0)
    )
    torch.testing.assert_close(weighted, per_row[0] + 0.5 * per_row[1])


def test_the_k_class_loss_is_soft_cross_entropy_weighted_by_row_and_by_class_balance():
    """Three classes at shares (0.5, 0.3, 0.2): each class weighs 1 / (3 * share); a row's loss is the
    cross-entropy of its (soft) targets, times its row weight; a target without its weight is refused."""
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.1, 0.2, 0.3]])
    target = torch.tensor([[1.0, 0.0, 0.0], [0.2, 0.5, 0.3]])
    loss = mlp.loss((0.5, 0.3, 0.2))
    class_weight = torch.tensor([1 / 1.5, 1 / 0.9, 1 / 0.6])
    per_row = -(target * torch.log_softmax(logits, -1) * class_weight).sum(-1)
    torch.testing.assert_close(
        loss(logits, torch.cat([target, torch.tensor([[1.0], [0.25]])], 1)), per_row[0] + 0.25 * per_row[1]
    )
    with pytest.raises(ValueError, match=r"targets of 3 classes are \[n, 4\]"):
        loss(logits, target)


def test_a_zero_weight_row_teaches_nothing():
    """Rows at weight 0 leave the gradient untouched: flipping their targets changes no weight."""
    p = load_params().train.replace(epochs=2, batch_size=8, hidden=(4,))
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(32, 3)).astype(np.float32))
    t = (x[:, 0] > 0).float()
    w = torch.tensor([1.0, 0.0] * 16)
    a, _ = fit_in_memory(x, torch.stack([t, w], 1), p)
    b, _ = fit_in_memory(x, torch.stack([torch.where(w > 0, t, 1 - t), w], 1), p)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
