"""Labeling functions for the demo `email` dataset (no text: counts and flags).

Each rule states the evidence it uses. Ham rules are precise (a reply, a thread,
a CC list); spam rules are weaker, so the label model weighs them by agreement.
"""
from __future__ import annotations

import pandas as pd

from tasks.labeling.lf import HAM, SPAM, labeling_function, vote_where

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
    return vote_where(df["number"].astype(str) == "none", SPAM)


@labeling_function()
def lf_winner(df: pd.DataFrame):
    """The word 'winner' appears."""
    return vote_where(df["winner"].astype(str) == "yes", SPAM)


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
    lf_replied_before, lf_reply_subject, lf_many_recipients, lf_has_cc, lf_long_message,
    lf_no_numbers, lf_winner, lf_short_plain_text, lf_urgent_subject, lf_no_sender,
]
