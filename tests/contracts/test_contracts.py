import json

import numpy as np
import pandas as pd
import pytest

from tasks.contracts import suite as contracts
from tasks.contracts.suite import ContractError, validate_frame
from tasks.plugins.emails import LABELED_CONTRACT as LABELED
from tasks.plugins.emails import RAW_CONTRACT as RAW
from tasks.validate_labeled import contract_view


def failed(result):
    return {(f.expectation, f.column) for f in result.failures}


def test_real_batch_passes(raw_batch):
    r = validate_frame(raw_batch, RAW)
    assert r.success, r.summary()
    assert r.evaluated == len(contracts.load_suite_spec(RAW)["expectations"])


@pytest.mark.parametrize(
    "breakage, expected",
    [
        (lambda df: df.drop(columns=["winner"]), ("expect_table_columns_to_match_set", None)),
        (lambda df: df.rename(columns={"cc": "carbon_copy"}), ("expect_table_columns_to_match_set", None)),
        (
            lambda df: df.assign(dollar=df["dollar"].astype(str) + "$"),
            ("expect_column_values_to_be_in_type_list", "dollar"),
        ),
        (
            lambda df: df.assign(num_char=df["num_char"].where(df.index > 3)),
            ("expect_column_values_to_not_be_null", "num_char"),
        ),
        (lambda df: df.assign(line_breaks=-df["line_breaks"]), ("expect_column_values_to_be_between", "line_breaks")),
        (lambda df: df.assign(email_id=7), ("expect_column_values_to_be_unique", "email_id")),
        (lambda df: df.assign(number="many"), ("expect_column_values_to_be_in_set", "number")),
        (lambda df: df.assign(re_subj=2), ("expect_column_values_to_be_in_set", "re_subj")),
        (lambda df: df.iloc[:0], ("expect_table_row_count_to_be_between", None)),
        (lambda df: df.assign(time="yesterday"), ("expect_column_values_to_match_regex", "time")),
    ],
)
def test_broken_batches_fail_naming_the_expectation(raw_batch, breakage, expected):
    r = validate_frame(breakage(raw_batch.copy()), RAW)
    assert not r.success
    assert expected in failed(r), r.summary()
    assert all(f.guards for f in r.failures)  # every failure says what it guards against
    assert expected[0] in r.summary()


def test_failure_report_samples_offending_values(raw_batch):
    df = raw_batch.copy()
    df.loc[[5, 9], "number"] = "lots"
    r = validate_frame(df, RAW)
    f = next(f for f in r.failures if f.column == "number")
    assert f.unexpected_count == 2 and f.sample_values == ["lots", "lots"] and f.sample_rows == [5, 9]


def test_labeled_contract(raw_batch):
    df = raw_batch.copy()
    rng = np.random.default_rng(0)
    df["label"] = np.where(rng.random(len(df)) < 0.1, 1, 0)
    df["label_prob"] = df["label"].astype(float)
    df["label_source"], df["label_weight"] = "weak", 1.0
    assert validate_frame(contract_view(df, 2), LABELED).success
    all_abstain = df.assign(label=-1, label_prob=np.nan)
    r = validate_frame(contract_view(all_abstain, 2), LABELED)
    assert ("expect_column_mean_to_be_between", "covered") in failed(r)
    all_spam = df.assign(label=1, label_prob=1.0)
    assert ("expect_column_mean_to_be_between", "label_is_1") in failed(
        validate_frame(contract_view(all_spam, 2), LABELED)
    )


def _with_suite(tmp_path, spec) -> str:
    (tmp_path / "custom.json").write_text(json.dumps(spec))
    return str(tmp_path / "custom.json")


def test_unknown_expectation_type_is_refused_not_silently_dropped(tmp_path, raw_batch):
    suite = _with_suite(
        tmp_path,
        {
            "name": "custom",
            "expectations": [
                {"type": "expect_column_values_to_be_awesome", "kwargs": {"column": "cc"}, "meta": {"guards": "x"}}
            ],
        },
    )
    with pytest.raises(ContractError, match="did not load.*awesome"):
        validate_frame(raw_batch, suite)


def test_expectation_without_guard_note_is_refused(tmp_path):
    suite = _with_suite(
        tmp_path,
        {"name": "custom", "expectations": [{"type": "expect_column_to_exist", "kwargs": {"column": "cc"}}]},
    )
    with pytest.raises(ContractError, match="guards"):
        contracts.load_suite_spec(suite)


def test_suite_hash_tracks_content(tmp_path):
    spec = {
        "name": "custom",
        "expectations": [{"type": "expect_column_to_exist", "kwargs": {"column": "cc"}, "meta": {"guards": "x"}}],
    }
    suite = _with_suite(tmp_path, spec)
    h1 = contracts.suite_hash(suite)
    spec["expectations"][0]["kwargs"]["column"] = "dollar"
    suite = _with_suite(tmp_path, spec)
    assert contracts.suite_hash(suite) != h1


def _labeled(raw_batch, spam_share=0.1, seed=0):
    df = raw_batch.copy()
    rng = np.random.default_rng(seed)
    df["label"] = np.where(rng.random(len(df)) < spam_share, 1, 0)
    df.loc[df.index[::10], "label"] = -1
    df["label_prob"] = df["label"].clip(lower=0).astype(float)
    df.loc[df["label"] == -1, "label_prob"] = np.nan
    df["label_source"] = np.where(df["label"] == -1, "none", "weak")
    df["label_weight"] = np.where(df["label"] == -1, 0.0, 1.0)
    return df


def test_distribution_checks_are_skipped_without_a_previous_version(raw_batch):
    r = validate_frame(contract_view(_labeled(raw_batch), 2), LABELED)
    assert r.success and len(r.skipped) == 3 and "skipped" in r.summary()


def test_distribution_against_the_previous_version(emails):
    from tasks.plugins.emails import GOLD_COLUMN

    previous = _labeled(emails.iloc[:600].drop(columns=[GOLD_COLUMN]).reset_index(drop=True), seed=1)
    tonight = _labeled(emails.iloc[600:1200].drop(columns=[GOLD_COLUMN]).reset_index(drop=True), seed=2)
    ref = contract_view(previous, 2)
    ok = validate_frame(contract_view(tonight, 2), LABELED, reference=ref)
    assert ok.success and not ok.skipped and ok.evaluated == len(contracts.load_suite_spec(LABELED)["expectations"])

    flipped = tonight.assign(label=np.where(tonight["label"] == -1, -1, 1 - tonight["label"]))
    flipped["label_prob"] = flipped["label"].clip(lower=0).astype(float).where(flipped["label"] != -1)
    assert ("expect_column_kl_divergence_to_be_less_than", "label") in failed(
        validate_frame(contract_view(flipped, 2), LABELED, reference=ref)
    )

    inflated = tonight.assign(num_char=tonight["num_char"] * 10)
    r = validate_frame(contract_view(inflated, 2), LABELED, reference=ref)
    assert ("expect_column_median_to_be_between", "num_char") in failed(r)


def test_resolve_relative_is_pure_and_smoothed():
    ref = pd.DataFrame({"number": ["small"] * 9 + ["big"], "x": [1.0] * 10})
    e = {
        "type": "expect_column_kl_divergence_to_be_less_than",
        "kwargs": {"column": "number"},
        "meta": {"guards": "g", "relative_to_previous": {"categorical_kl": 0.1, "values": ["none", "small", "big"]}},
    }
    out = contracts.resolve_relative(e, ref)
    part = out["kwargs"]["partition_object"]
    assert part["values"] == ["big", "none", "small"] and abs(sum(part["weights"]) - 1) < 1e-9
    assert min(part["weights"]) > 0 and "partition_object" not in e["kwargs"]  # input untouched
    m = {
        "type": "expect_column_median_to_be_between",
        "kwargs": {"column": "x"},
        "meta": {"guards": "g", "relative_to_previous": {"max_rel_change": 0.5}},
    }
    assert contracts.resolve_relative(m, ref)["kwargs"] | {} == {"column": "x", "min_value": 0.5, "max_value": 1.5}


def test_failure_report_carries_whole_offending_rows(raw_batch):
    df = raw_batch.copy()
    df.loc[[3], "cc"] = -4
    f = next(f for f in validate_frame(df, RAW).failures if f.column == "cc")
    assert f.rows and f.rows[0]["cc"] == -4 and f.rows[0]["email_id"] == int(df.loc[3, "email_id"])
