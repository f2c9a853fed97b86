"""The embedding LF (tasks/labeling/embedding_lf.py): out-of-fold votes on the gold dev rows, abstention
below vote_at, K classes; the keep-if-it-helps rule; and in the weak_label step, on the 3-class `moods`
toy with a 2-layer copy of all-MiniLM-L6-v2 (tests/helpers/checkpoints.py), embeddings that land in the
cache a frozen training then reads without computing any again."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tasks.core.context import StepContext
from tasks.core.params import repo_params
from tasks.core.settings import Settings
from tasks.labeling.embedding_lf import NAME, embedding_lf, votes_of, with_embedding_lf
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import ABSTAIN, LabelingFunction, apply_lfs, apply_lfs_dev
from tasks.reports.run_summary import build_summary, render_text
from tests.conftest import write_params_with_model
from tests.helpers.checkpoints import truncated_checkpoint
from tests.toy import moods

WP = repo_params().weak_label


def _frame(texts):
    return pd.DataFrame({"text": list(texts)})


def _texts(df):
    return df["text"].astype(str).tolist()


class Lookup:
    """embed(texts) from a table of vectors by text; the texts it was asked for counted."""

    def __init__(self, vectors: dict[str, np.ndarray]):
        self.vectors, self.asked = vectors, []

    def __call__(self, texts):
        self.asked += list(texts)
        return np.stack([self.vectors[t] for t in texts])


def test_votes_are_the_most_probable_class_at_vote_at_else_abstain():
    two = np.array([[0.6, 0.4], [0.2, 0.8], [0.5, 0.5], [0.7, 0.3]])
    assert votes_of(two, 0.7).tolist() == [ABSTAIN, 1, ABSTAIN, 0]
    three = np.array([[0.2, 0.7, 0.1], [0.4, 0.3, 0.3], [0.05, 0.05, 0.9]])
    assert votes_of(three, 0.7).tolist() == [1, ABSTAIN, 2]
    assert votes_of(three, 0.35).tolist() == [1, 0, 2]


def test_dev_votes_are_out_of_fold_a_model_that_saw_the_row_would_memorize_it():
    """Noise embeddings (200 dims, 80 rows) with random labels: a model fitted on a row reproduces its label,
    one that never saw it guesses. The LF's dev votes guess; its votes by the full fit do not."""
    rng = np.random.default_rng(0)
    texts = [f"row {i}" for i in range(80)]
    y = np.array([0, 1] * 40)
    embed = Lookup({t: rng.normal(size=200) for t in texts})
    p = WP.embedding_lf.replace(c=100.0, vote_at=0.5, min_per_class=5, folds=5)
    lf = embedding_lf(_frame(texts), y, _texts, embed, p)
    full = lf(_frame(texts))
    assert (full == y).mean() == 1.0  # the full fit memorized every dev row
    oof = lf.dev_votes
    fired = oof != ABSTAIN
    assert fired.sum() > 40 and (oof[fired] == y[fired]).mean() < 0.75  # out of fold: a guess
    assert apply_lfs_dev(_frame(texts), [lf]).ravel().tolist() == oof.tolist()  # what the label model reads


def _k3(n=300, seed=1):
    """Three classes whose embeddings are noisy class centres: some rows confident, some not."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    centres = np.eye(3, 16) * 3
    texts = [f"text {i}" for i in range(n)]
    return texts, y, Lookup({t: centres[c] + rng.normal(scale=1.5, size=16) for t, c in zip(texts, y)})


def test_three_classes_each_voted_and_more_abstention_at_a_higher_vote_at():
    texts, y, embed = _k3()
    dev, y_dev = _frame(texts[:200]), y[:200]
    low = embedding_lf(dev, y_dev, _texts, embed, WP.embedding_lf.replace(vote_at=0.5), classes=3)
    high = embedding_lf(dev, y_dev, _texts, embed, WP.embedding_lf.replace(vote_at=0.9), classes=3)
    rest = _frame(texts[200:])
    v_low, v_high = low(rest, classes=3), high(rest, classes=3)  # checked to be -1..2
    assert set(v_low.tolist()) >= {0, 1, 2}
    assert (v_high == ABSTAIN).sum() > (v_low == ABSTAIN).sum()
    fired = v_high != ABSTAIN
    assert (v_high[fired] == v_low[fired]).all()  # the same argmax, only more of them withheld
    assert (v_low[v_low != ABSTAIN] == y[200:][v_low != ABSTAIN]).mean() > 0.8
    assert set(low.dev_votes.tolist()) >= {0, 1, 2}
    row = int(low.row(rest.iloc[0]))  # one row, as Snorkel's row-wise appliers call it
    assert row == int(v_low[0])


def test_too_few_gold_rows_of_a_class_builds_no_lf():
    texts, y, embed = _k3(60)
    y = np.where(y == 2, 1, y)
    y[:3] = 2  # three rows of class 2
    assert embedding_lf(_frame(texts), y, _texts, embed, WP.embedding_lf, classes=3) is None
    assert embed.asked == []  # nothing embedded for it


def _lfs_and_labels(y_dev, y_batch, noise_seed=0):
    """Three weak rule LFs (70% accurate, half coverage) on dev and batch rows indexed by `i`."""
    rng = np.random.default_rng(noise_seed)
    truth = np.concatenate([y_dev, y_batch])
    cols = []
    for _ in range(3):
        v = np.where(rng.random(len(truth)) < 0.7, truth, 1 - truth)
        cols.append(np.where(rng.random(len(truth)) < 0.5, v, ABSTAIN).astype(np.int8))

    def rule(j):
        return LabelingFunction(f"rule_{j}", lambda df: cols[j][df["i"].to_numpy()])

    return [rule(j) for j in range(3)]


def _labeling(lfs, dev, batch, y_dev):
    L, L_dev = apply_lfs(batch, lfs), apply_lfs_dev(dev, lfs)
    return L, L_dev, label_batch(L, L_dev, y_dev, lfs, WP)


@pytest.mark.parametrize("informative", [True, False])
def test_the_lf_is_kept_only_where_the_label_models_dev_auc_gains(informative):
    rng = np.random.default_rng(3)
    n_dev, n_batch = 200, 400
    y = rng.integers(0, 2, n_dev + n_batch)
    frame = pd.DataFrame({"i": np.arange(n_dev + n_batch), "text": [f"t{i}" for i in range(n_dev + n_batch)]})
    dev, batch, y_dev = frame.iloc[:n_dev], frame.iloc[n_dev:], y[:n_dev]
    signal = y if informative else rng.integers(0, 2, len(y))  # embeddings that know the label, or noise
    noise = rng.normal(scale=0.6, size=(len(y), 2))
    embed = Lookup({t: np.array([2.0 * s - 1, 0.0]) + e for t, s, e in zip(frame.text, signal, noise)})
    lfs = _lfs_and_labels(y_dev, y[n_dev:])
    L, L_dev, out = _labeling(lfs, dev, batch, y_dev)
    lf = embedding_lf(dev, y_dev, _texts, embed, WP.embedding_lf)
    lfs2, L2, L2_dev, out2, choice = with_embedding_lf(batch, dev, y_dev, lfs, L, L_dev, out, lf, WP)
    assert choice.auc_without == out.quality["label_model"]["roc_auc"]
    report = choice.report()
    assert report["kept"] is choice.kept and report["reason"].startswith("kept" if choice.kept else "dropped")
    if informative:
        assert choice.kept and choice.auc_with > choice.auc_without
        assert [f.name for f in lfs2] == ["rule_0", "rule_1", "rule_2", NAME] and L2.shape == (n_batch, 4)
        assert out2.quality["label_model"]["roc_auc"] == choice.auc_with
    else:
        assert not choice.kept and choice.auc_with <= choice.auc_without
        assert lfs2 is lfs and L2 is L and L2_dev is L_dev and out2 is out  # the labeling as it was
    # a gain it must exceed: nothing is ever kept at min_gain 1
    strict = WP.replace(embedding_lf=WP.embedding_lf.replace(min_gain=1.0))
    assert not with_embedding_lf(batch, dev, y_dev, lfs, L, L_dev, out, lf, strict)[-1].kept


# ---- the weak_label step on moods (3 classes) with a 2-layer copy of the real checkpoint ----


def test_the_step_keeps_or_drops_it_reports_why_and_a_frozen_training_embeds_nothing_again(
    settings, tmp_path, monkeypatch
):
    from tasks.core.plugins import load_model_plugin
    from tasks.ingest import ingest
    from tasks.training import inputs
    from tasks.weak_label import weak_label

    (tmp_path / "bert").mkdir()
    small = truncated_checkpoint(tmp_path / "bert", layers=2, max_len=32)
    model = {"module": "tasks.plugins.bert", "params": {**small.params, "finetune": "frozen"}}
    params = write_params_with_model(
        tmp_path / "params.yaml",
        {
            "dataset": {"module": "tests.toy.moods"},
            "weak_label": {"embedding_lf": {"enabled": True}},  # weak_weight auto: folds rebuild the LFs
            "train": {"pretrained": small.spec.model_dump(mode="json")},
        },
        model,
    )
    monkeypatch.setenv("SLUICE_PARAMS", str(params))
    settings = Settings.from_env()  # the fixture's, reading these params
    computed = []
    compute = inputs.FrozenTrunk._compute

    def counting(self, texts):
        computed.extend(texts)
        return compute(self, texts)

    monkeypatch.setattr(inputs.FrozenTrunk, "_compute", counting)

    ctx = StepContext.create("r1", settings)
    ing = ingest(ctx)
    wl = weak_label(ctx, ingest=ing)
    report = wl.embedding_lf
    assert report is not None and report["reason"].startswith("kept" if report["kept"] else "dropped")
    assert (report["label_model_dev_auc_with"] > report["label_model_dev_auc_without"]) == report["kept"]
    assert (NAME in [r["lf"] for r in wl.lf_table]) == report["kept"]
    assert 0 < report["dev_coverage"] <= 1 and len(report["cache"]) == 64
    summary = build_summary("r1", {"ingest": ing, "weak_label": wl}, {"prod_model": None}, [])
    assert summary["labeling"]["embedding_lf"] == report
    assert f"  embedding LF   {report['reason']}" in render_text(summary).splitlines()  # the run summary says
    batch = pd.read_parquet(ing.staged)
    dev = pd.read_parquet(settings.layout.gold / "dev.parquet")
    wanted = set(moods.texts(batch)) | set(moods.texts(dev))
    assert set(computed) == wanted and len(computed) == len(wanted)  # each text once, weak-weight folds too

    # the frozen training's own trunk, built as the engine builds it: its cache folder holds every text
    computed.clear()
    p = ctx.params.train
    frozen = inputs.frozen_trunk(
        load_model_plugin(p.model.module),
        p,
        moods,
        inputs.pretrained_tokenizer(p.pretrained),
        settings,
        SimpleNamespace(master=True, distributed=False),
        lambda: moods.texts(batch),
    )
    assert frozen is not None and frozen.cache.fingerprint == report["cache"]
    assert computed == []  # every trainable text of this batch was embedded by the labeling step
    assert frozen.cache.folder.parent == settings.home / "cache" / "embeddings"
