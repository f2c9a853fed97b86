"""Labeling functions for the demo `email` dataset (no text: counts and flags).

Each rule states the evidence it uses. Ham rules are precise (a reply, a thread,
a CC list); spam rules are weaker, so the label model weighs them by agreement.
`make_lfs(dev, y_dev)` adds one model-based LF fitted on the gold dev set.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tasks.labeling.lf import ABSTAIN, HAM, SPAM, LabelingFunction, labeling_function, vote_where

# Message length is in thousands of characters.
SHORT_MESSAGE_KCHARS = 1.0
LONG_MESSAGE_KCHARS = 8.0


@labeling_function()
def lf_replied_before(df: pd.DataFrame):
    """The recipient has sent mail to this sender before: a known correspondent."""
    return vote_where(df["sent_email"] == 1, HAM)


@labeling_function()
def lf_reply_subject(df: pd.DataFrame):
    """Subject starts with Re: -- part of an existing conversation."""
    return vote_where(df["re_subj"] == 1, HAM)


@labeling_function()
def lf_many_recipients(df: pd.DataFrame):
    """Addressed to several named recipients (mailing among colleagues)."""
    return vote_where(df["to_multiple"] == 1, HAM)


@labeling_function()
def lf_has_cc(df: pd.DataFrame):
    """Someone was CC'd: bulk spam rarely uses CC."""
    return vote_where(df["cc"] > 0, HAM)


@labeling_function()
def lf_long_message(df: pd.DataFrame):
    """Long messages are mostly real correspondence or newsletters the user signed up for."""
    return vote_where(df["num_char"] > LONG_MESSAGE_KCHARS, HAM)


@labeling_function()
def lf_no_numbers(df: pd.DataFrame):
    """No numbers at all in the body: typical of short template spam."""
    return vote_where(df["number"] == "none", SPAM)


@labeling_function()
def lf_winner(df: pd.DataFrame):
    """The word 'winner' appears."""
    return vote_where(df["winner"] == "yes", SPAM)


@labeling_function()
def lf_short_plain_text(df: pd.DataFrame):
    """Very short, plain-text (no HTML) message with no prior contact."""
    return vote_where((df["num_char"] < SHORT_MESSAGE_KCHARS) & (df["format"] == 0) & (df["sent_email"] == 0), SPAM)


@labeling_function()
def lf_urgent_subject(df: pd.DataFrame):
    """'Urgent' in the subject line."""
    return vote_where(df["urgent_subj"] == 1, SPAM)


@labeling_function()
def lf_no_sender(df: pd.DataFrame):
    """No From: address listed."""
    return vote_where(df["from"] == 0, SPAM)


LFS = [
    lf_replied_before,
    lf_reply_subject,
    lf_many_recipients,
    lf_has_cc,
    lf_long_message,
    lf_no_numbers,
    lf_winner,
    lf_short_plain_text,
    lf_urgent_subject,
    lf_no_sender,
]


# The model-based LF votes only where its classifier is confident.
MODEL_SPAM_AT = 0.8
MODEL_HAM_AT = 0.2
MODEL_FOLDS = 5


def _classifier():
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced", max_iter=1000))


def _votes(p_spam: np.ndarray) -> np.ndarray:
    return np.where(p_spam >= MODEL_SPAM_AT, SPAM, np.where(p_spam <= MODEL_HAM_AT, HAM, ABSTAIN)).astype(np.int8)


def lf_dev_classifier(dev: pd.DataFrame, y_dev: np.ndarray, seed: int = 0) -> LabelingFunction:
    """A logistic regression over the model features, fitted on the gold dev set.

    Leakage care (as in Snorkel's tutorials): on the dev rows themselves it votes out of
    fold (each fold predicted by a model that never saw it), so its dev accuracy, and the
    label-model choice made on dev, are not inflated by memorized labels.
    """
    from sklearn.model_selection import StratifiedKFold

    from tasks.datasets.emails import featurize

    x_dev = featurize(dev)
    if len(np.unique(y_dev)) < 2 or min(np.bincount(y_dev)) < MODEL_FOLDS:
        raise ValueError(f"the dev classifier LF needs at least {MODEL_FOLDS} gold examples of each class")
    oof = np.zeros(len(dev))
    for train_idx, test_idx in StratifiedKFold(MODEL_FOLDS, shuffle=True, random_state=seed).split(x_dev, y_dev):
        oof[test_idx] = _classifier().fit(x_dev[train_idx], y_dev[train_idx]).predict_proba(x_dev[test_idx])[:, 1]
    model = _classifier().fit(x_dev, y_dev)

    def fn(df):
        single = isinstance(df, pd.Series)
        frame = df.to_frame().T if single else df
        votes = _votes(model.predict_proba(featurize(frame))[:, 1])
        return votes[0] if single else votes

    return LabelingFunction(
        name="lf_dev_classifier", fn=fn, doc=lf_dev_classifier.__doc__.splitlines()[0], dev_votes=_votes(oof)
    )


def make_lfs(dev: pd.DataFrame, y_dev: np.ndarray) -> list[LabelingFunction]:
    """Every LF of this dataset for one run: the rules, plus the classifier fitted on this dev set."""
    return [*LFS, lf_dev_classifier(dev, y_dev)]
