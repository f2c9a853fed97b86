"""Model cards: one per registered model version, as markdown and HTML, under
`$SLUICE_HOME/model-cards/<version>.{md,html}`, written by the `register` step (and rewritten, the
same, on a retry). Outside the registry's git tree on purpose: a card is derived from the version's
record and its data version's record (which the registry keeps immutable), so it can always be made
again with `python -m tasks.monitoring.model_card model-vN`.

Contents (TFX model cards' sections, from Sluice's own records): what the model is and where it came
from (data version, parent, code commit, params hash, run), training data (partitions, label source,
labeling statistics), the data contracts it passed, the labeling functions, metrics overall (gold
test: torch, fp32 ONNX, served ONNX) and per slice (gold dev), the compression chain, how to
reproduce it, and the limits of those figures.

`card_blocks` is pure; `render_markdown` / `render_html` turn its blocks into text.
"""

from __future__ import annotations

import argparse
import math
from html import escape
from pathlib import Path
from typing import Any

from tasks.core.files import atomic_write_text

QUALITY_KEYS = ("roc_auc", "f1", "precision", "recall", "accuracy", "n")
Block = tuple  # ("h2", text) | ("p", text) | ("table", header, rows)


def card_dir(settings: Any) -> Path:
    return settings.layout.home / "model-cards"


def card_paths(settings: Any, version: str) -> dict[str, Path]:
    from tasks.registry import check_version

    check_version("model", version)
    folder = card_dir(settings)
    return {"md": folder / f"{version}.md", "html": folder / f"{version}.html"}


def _v(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "n/a" if not math.isfinite(x) else f"{x:.4g}"
    return str(x)


def _quality_rows(named: dict[str, dict[str, Any] | None]) -> list[list[str]]:
    return [[name, *(_v((q or {}).get(k)) for k in QUALITY_KEYS)] for name, q in named.items() if q]


def card_blocks(info: dict[str, Any], data: dict[str, Any] | None, stage: str | None) -> list[Block]:
    """The card's content from the model version's record, its data version's record and its stage."""
    data = data or {}
    version = info.get("version", "?")
    comp = info.get("compression") or {}
    train = info.get("train") or {}
    blocks: list[Block] = [
        ("h1", f"Model card: {version}"),
        (
            "p",
            "A spam classifier (MLP on the emails dataset's features) trained by Sluice's nightly pipeline on "
            "weakly labeled data; the served artifact is the compressed ONNX file below.",
        ),
        ("h2", "Model details"),
        (
            "table",
            ["field", "value"],
            [
                ["version", version],
                ["stage", stage or "unknown"],
                ["created", info.get("created_at")],
                ["run", info.get("run_id")],
                ["data version", info.get("data_version")],
                ["parent model (warm start)", info.get("parent_model") or "none: trained from scratch"],
                ["code commit", info.get("code_commit")],
                ["params hash", info.get("params_hash")],
                [
                    "served artifact",
                    f"{comp.get('artifact')} sha256 "
                    f"{((info.get('artifacts') or {}).get(comp.get('artifact') or '') or {}).get('sha256', '-')}",
                ],
            ],
        ),
        ("h2", "Training data"),
        (
            "table",
            ["field", "value"],
            [
                ["data version", data.get("version") or info.get("data_version")],
                ["parent data version", data.get("parent") or "none"],
                ["rows", data.get("total_rows")],
                ["partitions", ", ".join(p.get("batch_id", "?") for p in data.get("partitions") or []) or "-"],
                ["labels from", data.get("label_source")],
                *[[f"labeling {k}", _v(v)] for k, v in sorted((data.get("labeling_stats") or {}).items())],
                [
                    "trained rows / epochs / processes",
                    f"{train.get('rows')} / {train.get('epochs')} / {train.get('world_size')}",
                ],
                ["final loss", _v(train.get("final_loss"))],
            ],
        ),
        ("h2", "Data contracts"),
        (
            "table",
            ["contract", "suite hash", "suite file"],
            [[name, h, f"data_contracts/{name}.json"] for name, h in sorted((data.get("contracts") or {}).items())],
        )
        if data.get("contracts")
        else ("p", "No contract hashes recorded with this data version."),
        ("h2", "Labeling functions"),
        (
            "p",
            f"Module {data.get('lf_module', '-')} (hash {data.get('lf_module_hash', '-')}); statistics on the "
            "batch this data version added, accuracy on the gold dev set.",
        ),
        (
            "table",
            ["LF", "polarity", "coverage", "overlaps", "conflicts", "dev accuracy"],
            [
                [
                    r.get("lf"),
                    "/".join({0: "ham", 1: "spam"}.get(p, str(p)) for p in r.get("polarity") or []) or "-",
                    _v(r.get("coverage")),
                    _v(r.get("overlaps")),
                    _v(r.get("conflicts")),
                    _v(r.get("dev_accuracy")),
                ]
                for r in data.get("lf_analysis") or []
            ],
        ),
        ("h2", "Metrics overall (gold test set)"),
        ("table", ["model", *QUALITY_KEYS], _quality_rows(info.get("metrics") or {})),
        ("h2", "Metrics per slice (gold dev set, served model)"),
        (
            "table",
            ["slice", *QUALITY_KEYS],
            _quality_rows({"overall": comp.get("dev"), **(comp.get("dev_slices") or {})}),
        ),
        ("h2", "Compression chain"),
        (
            "table",
            ["step", "kind", "config"],
            [
                [i + 1, c.get("kind"), ", ".join(f"{k}={v}" for k, v in sorted(c.items()) if k != "kind") or "-"]
                for i, c in enumerate(comp.get("chain") or [])
            ],
        )
        if comp.get("chain")
        else ("p", "No compression step: the fp32 ONNX model is served."),
        (
            "p",
            f"Chosen {comp.get('chosen')}: {_v(comp.get('bytes'))} B (fp32 {_v(comp.get('fp32_bytes'))} B), "
            f"batch-1 latency {_v(comp.get('latency_b1_ms'))} ms, fp32 parity {_v(comp.get('parity_max_abs'))}.",
        ),
        ("h2", "Reproduce"),
        (
            "p",
            f"`python -m tasks.reproduce {version}` rebuilds it from the recorded commit, params, data "
            "version and parent, and compares weights, outputs and metrics.",
        ),
        ("h2", "Limits of these figures"),
        (
            "p",
            "Training labels are weak labels (labeling functions), not ground truth; quality is measured on a "
            "small hand-labeled gold set (the `n` column), where spam is a minority class: read ROC AUC and F1 "
            "before accuracy.",
        ),
    ]
    return blocks


def render_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if b[0] == "h1":
            out += [f"# {b[1]}", ""]
        elif b[0] == "h2":
            out += [f"## {b[1]}", ""]
        elif b[0] == "p":
            out += [escape(str(b[1]), quote=False), ""]
        elif b[0] == "table":
            header, rows = b[1], b[2]
            # raw HTML in a markdown cell would be rendered by a markdown viewer: escape it, and '|'
            cell = lambda v: escape(_v(v), quote=False).replace("|", "\\|").replace("\n", " ")  # noqa: E731
            out += ["| " + " | ".join(map(cell, header)) + " |", "|" + " --- |" * len(header)]
            out += ["| " + " | ".join(map(cell, r)) + " |" for r in rows] or ["| (none) |" + " |" * (len(header) - 1)]
            out.append("")
    return "\n".join(out)


def render_html(blocks: list[Block]) -> str:
    out: list[str] = []
    title = next((b[1] for b in blocks if b[0] == "h1"), "Model card")
    for b in blocks:
        if b[0] in ("h1", "h2", "p"):
            out.append(f"<{b[0]}>{escape(str(b[1]))}</{b[0]}>")
        elif b[0] == "table":
            head = "".join(f"<th>{escape(_v(h))}</th>" for h in b[1])
            body = "".join("<tr>" + "".join(f"<td>{escape(_v(c))}</td>" for c in r) + "</tr>" for r in b[2])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    style = (
        "body{font-family:sans-serif;margin:1.5em auto;max-width:60em;color:#222}"
        "table{border-collapse:collapse;font-size:.85em} td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}"
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(str(title))}</title>'
        f"<style>{style}</style></head><body>{''.join(out)}</body></html>\n"
    )


def write_model_card(settings: Any, version: str) -> dict[str, Path]:
    """Write the card of `version` (markdown and HTML) from the registry's records; returns the paths."""
    from tasks.registry import Registry

    reg = Registry(settings)
    info = reg.model_version_info(version)
    data = reg.data_version_info(info["data_version"]) if info.get("data_version") else None
    stage = ((reg.state().get("models") or {}).get(version) or {}).get("stage")
    blocks = card_blocks(info, data, stage)
    paths = card_paths(settings, version)
    atomic_write_text(paths["md"], render_markdown(blocks))
    atomic_write_text(paths["html"], render_html(blocks))
    return paths


def main(argv: list[str] | None = None) -> int:
    from tasks.core.settings import Settings

    parser = argparse.ArgumentParser(description="write a registered model version's card (markdown and HTML)")
    parser.add_argument("version", help="model-vN")
    args = parser.parse_args(argv)
    paths = write_model_card(Settings.from_env(), args.version)
    print(f"model card: {paths['md']} and {paths['html']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
