"""The weak_label step writes what the trainer needs: gold where it exists, weighted weak labels elsewhere."""

import pandas as pd

from tasks.core.context import StepContext
from tasks.ingest import ingest
from tasks.labeling.mix import label_columns
from tasks.validate_labeled import validate_labeled
from tasks.weak_label import weak_label


def test_weak_label_mixes_the_batchs_gold_with_weighted_weak_labels(settings):
    ctx = StepContext.create("r1", settings, {"weak_label": {"gold_budget": 0.2, "weak_weight": 0.5}})
    wl = weak_label(ctx, ingest=ingest(ctx))
    labeled = pd.read_parquet(wl.labeled)
    assert set(label_columns(2)) <= set(labeled.columns)
    gold, weak = labeled["label_source"] == "gold", labeled["label_source"] == "weak"
    assert wl.label_counts["gold"]["rows"] == int(gold.sum()) and 0.1 < gold.mean() < 0.3
    assert (labeled.loc[gold, "label_weight"] == 1).all() and (labeled.loc[weak, "label_weight"] == 0.5).all()
    # gold rows carry the dataset's true label, hard, as their target
    truth = pd.read_parquet(settings.layout.gold / "dev.parquet")  # (dev rows are never in a batch)
    assert not labeled["email_id"].isin(truth["email_id"]).any()
    assert set(labeled.loc[gold, "label_prob"]) <= {0.0, 1.0}
    assert (labeled.loc[gold, "label"] == labeled.loc[gold, "label_prob"]).all()
    assert wl.mix == "weak_plus_gold" and wl.weak_weight == 0.5
    assert validate_labeled(ctx, weak_label=wl).passed  # the contract accepts the new columns


def test_auto_weak_weight_is_chosen_on_dev_folds_and_recorded(settings):
    ctx = StepContext.create("r2", settings)  # params.yaml: gold_budget 0.05, weak_weight auto
    wl = weak_label(ctx, ingest=ingest(ctx))
    choice = wl.weak_weight_choice
    assert choice["folds"] == 3 and set(choice["fold_auc"]) == {"0", "0.3", "1"}
    assert choice["fold_auc"][f"{wl.weak_weight:g}"] == max(choice["fold_auc"].values())  # the best one
    labeled = pd.read_parquet(wl.labeled)
    assert (labeled.loc[labeled["label_source"] == "weak", "label_weight"] == wl.weak_weight).all()


def test_gold_only_mix_trains_no_weak_row(settings):
    ctx = StepContext.create("r3", settings, {"weak_label": {"gold_budget": 0.5, "mix": "gold_only"}})
    wl = weak_label(ctx, ingest=ingest(ctx))
    labeled = pd.read_parquet(wl.labeled)
    assert (labeled.loc[labeled["label_source"] != "gold", "label_weight"] == 0).all()
    assert wl.label_counts["weak"]["training_rows"] == 0 and wl.label_counts["gold"]["training_rows"] > 150
