"""Model cards from a real registry: data version, contracts, LFs, metrics overall and per slice,
compression chain, code commit; markdown and HTML, escaped."""

import pytest

from tasks.core.settings import Settings
from tasks.registry import Registry
from tasks.reports.model_card import card_blocks, card_paths, render_html, render_markdown, write_model_card

HOSTILE = "<script>alert(1)</script>|pipe"
LF_TABLE = [
    {"lf": "lf_reply_subject", "polarity": [0], "coverage": 0.30, "overlaps": 0.29, "conflicts": 0.02,
     "dev_accuracy": 1.0},
    {"lf": HOSTILE, "polarity": [1], "coverage": 0.12, "overlaps": 0.10, "conflicts": 0.03, "dev_accuracy": None},
]  # fmt: skip
QUALITY = {"roc_auc": 0.86, "f1": 0.45, "precision": 0.31, "recall": 0.89, "accuracy": 0.80, "n": 785.0}


def data_meta(batch: str, spam_share: float, run_id: str) -> dict:
    """What the snapshot step records with a data version (tasks/snapshot.py)."""
    return {
        "rows_by_batch": {batch: 20},
        "run_id": run_id,
        "contracts": {"raw_batch": "4783b2c9ac3a38e2", "labeled": "2bc21ba9295dba96"},
        "lf_module": "tasks.plugins.emails.lfs",
        "lf_module_hash": "cbe77a877ffe68b9",
        "label_source": "majority_vote",
        "labeling_stats": {"coverage": 0.84, "conflict_rate": 0.09, "spam_share": spam_share},
        "lf_analysis": LF_TABLE,
    }


def lineage(data_version: str, parent: str | None) -> dict:
    """The register step's lineage (tasks/register.py), with its real keys."""
    return {
        "data_version": data_version,
        "code_commit": "0123456789abcdef0123456789abcdef01234567",
        "params_hash": "feedfacecafe",
        "parent_model": parent,
        "metrics": {"torch": QUALITY, "onnx_fp32": QUALITY, "onnx_served": {**QUALITY, "roc_auc": 0.85}},
        "train": {"rows": 866, "epochs": 8, "world_size": 2, "final_loss": 0.058},
        "compression": {
            "artifact": "model.served.onnx",
            "chosen": "fp16",
            "chain": [{"kind": "prune", "sparsity": 0.5}, {"kind": "fp16"}],
            "bytes": 5716,
            "fp32_bytes": 7782,
            "latency_b1_ms": 0.022,
            "parity_max_abs": 1.2e-7,
            "dev": QUALITY,
            "dev_slices": {"format=plain": {**QUALITY, "roc_auc": 0.83}, "format=html": QUALITY},
        },
        "reproduce": {  # the part of the register step's `reproduce` record the card reads
            "dataset": {"module": "tasks.plugins.emails", "name": "emails", "classes": ["ham", "spam"]},
            "params": {"train": {"model": {"module": "tasks.plugins.mlp", "params": {"hidden": [32, 16]}}}},
        },
    }


def build_registry(home, tmp_path) -> Registry:
    """data-v1 -> model-v1 (promoted), data-v2 -> model-v2 (a candidate warm-started from model-v1)."""
    import pandas as pd

    reg = Registry(Settings.from_env({"SLUICE_HOME": str(home)}))
    for k, share in ((1, 0.18), (2, 0.09)):
        part = tmp_path / f"b{k}.parquet"
        pd.DataFrame({"email_id": range(20 * k, 20 * k + 20), "label": [0, 1] * 10}).to_parquet(part)
        reg.snapshot({f"batch-000{k}": part}, data_meta(f"batch-000{k}", share, f"run-{k}"))
        art = tmp_path / f"m{k}.onnx"
        art.write_bytes(b"onnx bytes of model %d" % k)
        reg.register_model(
            f"run-{k}", {"model.served.onnx": art}, lineage(f"data-v{k}", f"model-v{k - 1}" if k > 1 else None)
        )
        if k == 1:
            reg.promote("model-v1", "first model", artifact="model.served.onnx")
    return reg


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DVC_NO_ANALYTICS", "1")
        yield build_registry(tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("inputs"))


def test_card_holds_data_contracts_lfs_metrics_slices_chain_and_commit(registry):
    paths = write_model_card(registry.settings, "model-v2")
    assert paths == card_paths(registry.settings, "model-v2")
    md = paths["md"].read_text()
    assert md.startswith("# Model card: model-v2")
    for expected in (
        "| data version | data-v2 |",
        "| parent data version | data-v1 |",
        "| parent model (warm start) | model-v1 |",
        "| stage | candidate |",
        "| code commit | 0123456789abcdef0123456789abcdef01234567 |",
        "| raw_batch | 4783b2c9ac3a38e2 |",
        "| lf_reply_subject | ham | 0.3 | 0.29 | 0.02 | 1 |",
        "| format=plain | 0.83 |",
        "| onnx_served | 0.85 |",
        "| 1 | prune | sparsity=0.5 |",
        "| 2 | fp16 | - |",
        "python -m tasks.reproduce model-v2",
        "A 2-class classifier (ham, spam) on the emails dataset (model plug-in tasks.plugins.mlp)",
    ):
        assert expected in md, expected
    # A '|' in data cannot break the markdown table; HTML gets every string escaped.
    assert "<script>" not in md and "| &lt;script&gt;alert(1)&lt;/script&gt;\\|pipe | spam |" in md
    html = paths["html"].read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;|pipe" in html
    assert html.count("<table>") == sum(line.startswith("| --- |") for line in md.splitlines()) == 7
    assert "<td>data-v2</td>" in html


def test_card_follows_the_stage(registry):
    assert "| stage | prod |" in write_model_card(registry.settings, "model-v1")["md"].read_text()


def test_card_without_data_record_or_chain_says_so():
    blocks = card_blocks({"version": "model-v7", "data_version": None}, None, None)
    md, html = render_markdown(blocks), render_html(blocks)
    assert "No contract hashes recorded" in md and "No compression step" in md and "| stage | unknown |" in md
    assert "| (none) |" in md  # an empty LF table still renders as a table
    assert html.startswith("<!DOCTYPE html>") and "model-v7" in html


def test_card_path_refuses_a_malformed_version(settings):
    from tasks.registry import RegistryError

    with pytest.raises(RegistryError):
        card_paths(settings, "../../etc/passwd")


def test_a_k_class_card_names_the_datasets_classes_and_an_old_record_its_indices():
    """The description and the LF table's votes come from the registered dataset's class names; a record
    registered before class names were kept shows the class numbers."""
    info = {**lineage("data-v1", None), "version": "model-v1"}
    info["reproduce"] = {
        "dataset": {"name": "three", "classes": ["neg", "neutral", "pos"]},
        "params": {"train": {"model": {"module": "tasks.plugins.transformer"}}},
    }
    data = {"lf_analysis": [{"lf": "lf_stars", "polarity": [0, 2], "coverage": 0.5}]}
    md = render_markdown(card_blocks(info, data, "candidate"))
    assert (
        "A 3-class classifier (neg, neutral, pos) on the three dataset (model plug-in tasks.plugins.transformer)"
        in (md)
    )
    assert "| lf_stars | neg/pos | 0.5 |" in md
    del info["reproduce"]
    md = render_markdown(card_blocks(info, data, "candidate"))
    assert "A classifier, trained by Sluice's nightly pipeline" in md and "| lf_stars | 0/2 | 0.5 |" in md
