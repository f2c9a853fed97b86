"""Model cards: one per registered model version, as markdown and HTML, under
`$SLUICE_HOME/model-cards/<version>.{md,html}`, written by the `register` step (and rewritten, the
same, on a retry). Outside the registry's git tree on purpose: a card is derived from the version's
record and its data version's record (which the registry keeps immutable), so it can always be made
again with `python -m tasks.reports.model_card model-vN`.

Contents (TFX model cards' sections, from Sluice's own records): what the model is and where it came
from (data version, parent, code commit, params hash, run), training data (partitions, label source,
labeling statistics), the data contracts it passed, the labeling functions, metrics overall (gold
test: torch, fp32 ONNX, served ONNX) and per slice (gold dev), the compression chain, how to
reproduce it, and the limits of those figures.

`card_blocks` is pure; `render_markdown` / `render_html` turn its blocks into text (the HTML through the
rendering layer: tasks/rendering/templates/model_card.html, with a per-slice chart).
"""

from __future__ import annotations

import argparse
import math
from html import escape
from pathlib import Path
from typing import Any

from tasks.core.files import atomic_write_text

QUALITY_KEYS = ("roc_auc", "f1", "precision", "recall", "accuracy", "n")
Block = tuple  # ("h1" | "h2" | "p", text) | ("table", header, rows) | ("chart", {labels, series, title})


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


def _class_names(info: dict[str, Any]) -> list[str] | None:
    """The dataset's class names as registered (reproduce.dataset.classes); None for a record before them."""
    return ((info.get("reproduce") or {}).get("dataset") or {}).get("classes")


def _description(info: dict[str, Any]) -> str:
    """What the model is, from its record: the dataset plug-in, its classes and the model plug-in."""
    reproduce = info.get("reproduce") or {}
    dataset = (reproduce.get("dataset") or {}).get("name")
    model = ((((reproduce.get("params") or {}).get("train") or {}).get("model")) or {}).get("module")
    classes = _class_names(info)
    what = f"A {len(classes)}-class classifier ({', '.join(classes)})" if classes else "A classifier"
    what += f" on the {dataset} dataset" if dataset else ""
    what += f" (model plug-in {model})" if model else ""
    return (
        f"{what}, trained by Sluice's nightly pipeline on weakly labeled data; the served artifact is the "
        "compressed ONNX file below."
    )


def _details(info: dict[str, Any], stage: str | None) -> list[Block]:
    version, comp = info.get("version", "?"), info.get("compression") or {}
    sha = ((info.get("artifacts") or {}).get(comp.get("artifact") or "") or {}).get("sha256", "-")
    return [
        ("h1", f"Model card: {version}"),
        ("p", _description(info)),
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
                ["served artifact", f"{comp.get('artifact')} sha256 {sha}"],
            ],
        ),
    ]


def _training_data(info: dict[str, Any], data: dict[str, Any]) -> list[Block]:
    train = info.get("train") or {}
    return [
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
            ["contract (its suite's name)", "suite hash"],
            [[name, h] for name, h in sorted((data.get("contracts") or {}).items())],
        )
        if data.get("contracts")
        else ("p", "No contract hashes recorded with this data version."),
    ]


def _labeling(data: dict[str, Any], classes: list[str] | None) -> list[Block]:
    name = lambda c: classes[c] if classes and 0 <= c < len(classes) else str(c)  # noqa: E731
    votes = lambda r: "/".join(name(p) for p in r.get("polarity") or []) or "-"  # noqa: E731
    return [
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
                [r.get("lf"), votes(r), *(_v(r.get(k)) for k in ("coverage", "overlaps", "conflicts", "dev_accuracy"))]
                for r in data.get("lf_analysis") or []
            ],
        ),
    ]


def _metrics(info: dict[str, Any]) -> list[Block]:
    comp = info.get("compression") or {}
    slices = {"overall": comp.get("dev"), **(comp.get("dev_slices") or {})}
    drawn = {k: q for k, q in slices.items() if q}
    chart = {
        "labels": list(drawn),
        "series": {k: [(q or {}).get(k) for q in drawn.values()] for k in ("roc_auc", "f1")},
        "title": "served model on the gold dev set, per slice",
    }
    return [
        ("h2", "Metrics overall (gold test set)"),
        ("table", ["model", *QUALITY_KEYS], _quality_rows(info.get("metrics") or {})),
        ("h2", "Metrics per slice (gold dev set, served model)"),
        ("table", ["slice", *QUALITY_KEYS], _quality_rows(slices)),
        *([("chart", chart)] if drawn else []),
    ]


def _compression(info: dict[str, Any]) -> list[Block]:
    comp = info.get("compression") or {}
    return [
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
    ]


def _closing(version: str) -> list[Block]:
    return [
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
            "small hand-labeled gold set (the `n` column), where a class may be rare: read ROC AUC and F1 "
            "before accuracy.",
        ),
    ]


def card_blocks(info: dict[str, Any], data: dict[str, Any] | None, stage: str | None) -> list[Block]:
    """The card's content from the model version's record, its data version's record and its stage."""
    data = data or {}
    return [
        *_details(info, stage),
        *_training_data(info, data),
        *_labeling(data, _class_names(info)),
        *_metrics(info),
        *_compression(info),
        *_closing(info.get("version", "?")),
    ]


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
    return "\n".join(out)  # a chart block has no markdown form: its table is beside it


def render_html(blocks: list[Block]) -> str:
    """The card as HTML (tasks/rendering/templates/model_card.html); a chart block drawn as an inline SVG."""
    from tasks.rendering import plots
    from tasks.rendering.html import render

    drawn = []
    for b in blocks:
        if b[0] == "chart":
            c = b[1]
            drawn.append(("chart", plots.bar_chart(c["labels"], c["series"], c["title"], y_max=1.0, height=2.8)))
        elif b[0] == "table":
            drawn.append(("table", b[1], [[_v(c) for c in r] for r in b[2]]))
        else:
            drawn.append(b)
    title = next((b[1] for b in blocks if b[0] == "h1"), "Model card")
    return render("model_card.html", title=title, blocks=drawn)


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
