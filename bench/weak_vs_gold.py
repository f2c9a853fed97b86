"""The labeling claim as labels saved: weak labels plus the gold that exists, against gold alone.

For each of `splits` random splits (the same splits, gold samples and test set for every arm):
20% of the dataset is the test set (never trained on, never judges a choice); on the rest, a
gold budget of k% of the data is sampled (stratified) and the pipeline's end model (params.yaml
train: the engine's model and noise-aware loss, trained in memory by `fit_in_memory`) is trained
four ways and scored by ROC AUC on the test set:

- full gold: every non-test row with its gold label (the reference, 100% manual labels);
- weak only, k%: the k% gold rows drive the LFs that learn from gold and the label-model choice;
  every other row gets a weak label (soft target), the gold rows themselves are not trained on;
- weak plus gold, k%: the k% gold rows (hard targets, weight 1) and the weak labels of the other
  rows (soft targets at the weak weight chosen on folds of the k% gold by the fast judge model of
  tasks/labeling/weak_weight.py, 0 when weak labels do not beat gold alone there), as the pipeline trains;
- gold only, k%: the k% gold rows alone;
- self-training, k% (K in SELF_TRAIN_KS): weak plus gold, then the end model's confident predictions
  on the rows every LF abstained on added as soft pseudo-labels and the model refit
  (bench/self_training.py); also judged out of fold on the k% gold (the fast judge model).

Records, per dataset (the emails demo; the tests/toy plug-in with the suffix `_toy`; the reviews text
plug-in with `_reviews`, bench/weak_vs_gold_reviews.py):
`weak_plus_gold_kK`, `gold_only_kK`, `weak_vs_gold_kK` = arm / full gold for K in KS (means over
the splits); `label_savings_at_95` = 1 - (smallest budget at which weak plus gold reaches 95% of
full gold) / (the same for gold only), budgets interpolated linearly (goal >= 0.8);
`weak_gold_margin_min` = min over K of weak plus gold - gold only (goal >= 0). A run also measures
the labeling choices its LF module asks for (ablation; the emails LFs: the dev-refined LFs, the
class-balance prior, the classifier LF's abstain thresholds; an LF module's `ABLATION`: its LF
groups left out in turn) by the labeling's ROC AUC on the k% gold rows, out of fold.
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.record import Record
from bench.self_training import judge_self_training, self_train
from tasks.core.params import load_params
from tasks.datasets import load_dataset, load_lfs
from tasks.evaluation.quality import classification_metrics
from tasks.labeling.label_model import label_batch
from tasks.labeling.lf import apply_lfs, apply_lfs_dev
from tasks.labeling.weak_weight import choose_weak_weight, fit_and_predict, fit_and_score, gold_targets, weak_targets

KS = (1, 2, 3, 5, 7, 10, 15, 20, 30)
TARGET = 0.95
EMAILS, TOY, REVIEWS = "tasks.plugins.emails", "tests.toy.dataset", "tasks.plugins.reviews"
ABLATION_KS = (5, 10)
SELF_TRAIN_KS = (2, 5, 10)


def names(suffix: str = "") -> list[str]:
    """The records one dataset's run produces (bench/__main__.py registers them)."""
    per_k = [f"{kind}_k{k}{suffix}" for kind in ("weak_plus_gold", "gold_only", "weak_vs_gold") for k in KS]
    per_k += [f"self_train_k{k}{suffix}" for k in SELF_TRAIN_KS]
    return per_k + [f"label_savings_at_95{suffix}", f"weak_gold_margin_min{suffix}"]


def budget_reaching(ratios: list[float], target: float = TARGET, ks: tuple[int, ...] = KS) -> float | None:
    """The smallest gold budget (percent) at which a curve over `ks` reaches `target`, linearly
    interpolated between measured budgets; ks[0] when it is there already, None when never."""
    for i, r in enumerate(ratios):
        if r >= target:
            if i == 0:
                return float(ks[0])
            lo, hi = ratios[i - 1], r
            return ks[i - 1] + (ks[i] - ks[i - 1]) * (target - lo) / (hi - lo)
    return None


def label_savings(
    weak_plus_gold: list[float], gold_only: list[float], ks: tuple[int, ...] = KS
) -> tuple[float, float | None, float | None]:
    """(savings, budget weak plus gold needs, budget gold alone needs); nan when both reach the target at
    the smallest budget measured (no savings can be measured there). Weak plus gold never reaching
    the target within KS saves nothing (0); gold alone never reaching it is measured at its last
    budget (a lower bound on what gold alone needs, so the savings are a lower bound too)."""
    k_mix, k_gold = budget_reaching(weak_plus_gold, ks=ks), budget_reaching(gold_only, ks=ks)
    if k_mix is None:
        return 0.0, None, k_gold
    if k_mix == k_gold == ks[0]:
        return float("nan"), k_mix, k_gold  # both there at the smallest budget: nothing measurable to save
    return 1.0 - k_mix / (k_gold if k_gold is not None else float(ks[-1])), k_mix, k_gold


def _ablation_variants(lf_module, wp) -> dict | None:
    """The labeling choices an LF module asks to have measured: its `ABLATION` (variant name -> make_lfs
    keywords), or the emails LFs' own list (their keyword flags and thresholds, and the label model's
    class-balance prior); None for a module that asks for none."""
    declared = getattr(lf_module, "ABLATION", None)
    if declared is not None:
        return {name: (kw, wp) for name, kw in declared.items()}
    if lf_module.__name__ != "tasks.plugins.emails.lfs":
        return None
    return {
        "base (10 rules, prior, 0.8/0.2)": ({"refined": False}, wp),
        "+ dev-refined spam LFs": ({"refined": True}, wp),
        "uniform class balance": ({"refined": False}, wp.replace(class_balance_prior=False)),
        "thresholds 0.7/0.3": ({"refined": False, "spam_at": 0.7, "ham_at": 0.3}, wp),
        "thresholds 0.9/0.1": ({"refined": False, "spam_at": 0.9, "ham_at": 0.1}, wp),
        "thresholds 0.6/0.4": ({"refined": False, "spam_at": 0.6, "ham_at": 0.4}, wp),
    }


def _ablation(gold, y, pool, y_pool, lf_module, wp) -> dict[str, tuple[float, float]]:
    """Labeling ROC AUC per variant: (on the k% gold rows, out of fold; on the pool's true labels)."""
    variants = _ablation_variants(lf_module, wp) or {}
    out = {}
    for name, (kw, p) in variants.items():
        lfs = lf_module.make_lfs(gold, y, **kw)
        lab = label_batch(apply_lfs(pool, lfs), apply_lfs_dev(gold, lfs), y, lfs, p)
        covered = ~np.isnan(lab.prob)
        pool_auc = classification_metrics(y_pool[covered], lab.prob[covered])["roc_auc"]
        out[name] = (lab.quality[lab.chosen]["roc_auc"], pool_auc)
    return out


def _auc(y: np.ndarray, prob: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, prob))


@dataclass
class WeakPlusGold:
    """One weak-plus-gold arm: gold rows (hard targets) plus the weak labels of the pool, as the pipeline trains."""

    auc: float  # test ROC AUC of the mix
    gold_only: float  # test ROC AUC of the gold rows alone (the same fit when the weak weight is 0)
    choice: Any  # the weak weight chosen on folds of the gold rows
    out: Any  # the labeling of the pool
    covered: np.ndarray  # pool rows some LF voted on
    x: np.ndarray  # what the mix trained on, and its targets
    t: np.ndarray
    x_abstained: np.ndarray  # pool rows no LF voted on (self-training's)
    first: np.ndarray | None  # the mix's P(spam) on [abstained rows; test rows] (None: weight 0)


def weak_plus_gold(gold, y, pool, x_test, y_test, make_lfs, featurize, wp, tp, judge=None) -> WeakPlusGold:
    """The pipeline's weak-plus-gold training on `gold` (labels `y`) and the unlabeled `pool`, scored on
    the test rows: the LFs learn from the gold, the label model labels the pool, the weak weight is
    chosen on folds of the gold. `judge` (a mask over the gold rows; default all): only those build the
    labeling and judge the weight, the others only train, in every fold (bench/active_labels.py: the
    queue's random share judges; its chosen rows, hard on purpose, would not judge fairly)."""
    j = np.ones(len(gold), bool) if judge is None else np.asarray(judge, bool)
    lab, y_lab = (gold, y) if judge is None else (gold.iloc[np.flatnonzero(j)], y[j])
    lfs = make_lfs(lab, y_lab)
    out = label_batch(apply_lfs(pool, lfs), apply_lfs_dev(lab, lfs), y_lab, lfs, wp)
    covered = ~np.isnan(out.prob)
    x_gold, x_weak = featurize(gold), featurize(pool)[covered]
    gold_only = fit_and_score(x_gold, gold_targets(y), x_test, y_test, tp)
    lm_auc = out.quality["label_model"]["roc_auc"]
    if judge is None:
        choice = choose_weak_weight(
            gold, y, pool, make_lfs, featurize, wp, train_on_judge_folds=True, label_model_auc=lm_auc
        )
    else:
        choice = choose_weak_weight(
            gold.iloc[np.flatnonzero(j)], y[j], pool, make_lfs, featurize, wp, train_on_judge_folds=True,
            fixed_gold=(gold.iloc[np.flatnonzero(~j)], y[~j]), label_model_auc=lm_auc,
        )  # fmt: skip
    x_abstained = featurize(pool)[~covered]  # the rows self-training pseudo-labels
    first = None  # the weak plus gold fit's P(spam) on [abstained rows; test rows]
    if choice.weight == 0:
        mixed = gold_only  # the same rows and targets: the same deterministic fit
        x, t = x_gold, gold_targets(y)
    else:
        x = np.concatenate([x_gold, x_weak])
        t = np.concatenate([gold_targets(y), weak_targets(out.prob, choice.weight)])
        first = fit_and_predict(x, t, np.concatenate([x_abstained, x_test]), tp)
        mixed = _auc(y_test, first[len(x_abstained) :])
    return WeakPlusGold(mixed, gold_only, choice, out, covered, x, t, x_abstained, first)


def run(splits: int = 5, dataset: str = EMAILS, suffix: str = "", ks: tuple[int, ...] = KS) -> list[Record]:
    return records(measure(range(splits), dataset, ks), suffix=suffix, ks=ks)


def measure(
    split_ids,
    dataset: str = EMAILS,
    ks: tuple[int, ...] = KS,
    lf_options: dict | None = None,
    with_ablation: bool = True,
) -> dict:
    """The raw figures of the given splits (JSON-safe): `records` merges any number of these, so
    the splits can also run as separate processes (`python -m bench.weak_vs_gold --splits 0 1`).
    `with_ablation` False skips the labeling-choice ablation (a quicker run of the arms alone)."""
    from sklearn.model_selection import train_test_split

    params = load_params()
    tp, wp = params.train, params.weak_label
    ds = load_dataset(dataset)
    lf_module = load_lfs(ds)
    make_lfs = functools.partial(lf_module.make_lfs, **(lf_options or {}))  # an LF-development variant
    gold_col, featurize = ds.GOLD_COLUMN, ds.featurize
    source = ds.load_source()
    n = len(source)
    arms = ("weak_plus_gold", "gold_only", "weak_vs_gold")
    ratios: dict[str, list[float]] = {f"{a}_k{k}": [] for a in arms for k in ks}
    details: dict[str, list] = {"full_gold_auc": []}
    ablation: dict[str, list[tuple[float, float]]] = {}
    t0 = time.time()
    for s in split_ids:
        rest, test = train_test_split(source, test_size=0.2, stratify=source[gold_col], random_state=100 + s)
        x_test, y_test = featurize(test), test[gold_col].to_numpy().astype(int)
        full = fit_and_score(featurize(rest), gold_targets(rest[gold_col].to_numpy()), x_test, y_test, tp)
        details["full_gold_auc"].append(full)
        for k in ks:
            gold, pool = train_test_split(
                rest, train_size=round(n * k / 100), stratify=rest[gold_col], random_state=200 + s
            )
            y = gold[gold_col].to_numpy().astype(int)
            pool = pool.drop(columns=[gold_col])
            arm = weak_plus_gold(gold, y, pool, x_test, y_test, make_lfs, featurize, wp, tp)
            out, covered, choice, mixed, gold_only = arm.out, arm.covered, arm.choice, arm.auc, arm.gold_only
            x_abstained, first, x, t = arm.x_abstained, arm.first, arm.x, arm.t
            weak_only = fit_and_score(featurize(pool)[covered], weak_targets(out.prob, 1.0), x_test, y_test, tp)
            if k in SELF_TRAIN_KS:
                st = self_train(x, t, x_abstained, x_test, functools.partial(fit_and_predict, tp=tp), first=first)
                judged = judge_self_training(
                    gold, y, pool, make_lfs, featurize, wp, choice.weight, train_on_judge_folds=True
                )
                ratios.setdefault(f"self_train_k{k}", []).append(_auc(y_test, st.scores) / full)
                details.setdefault(f"self_train_auc_k{k}", []).append(_auc(y_test, st.scores))
                details.setdefault(f"self_train_added_k{k}", []).append(st.added)
                details.setdefault(f"self_train_fold_auc_k{k}", []).append(judged.fold_auc)
                print(
                    f"[bench] {ds.NAME} split {s} k={k}%: self-training {_auc(y_test, st.scores):.3f} "
                    f"({st.added[-1] if st.added else 0} pseudo-labels of {len(x_abstained)} abstained rows; "
                    f"out-of-fold {judged.fold_auc or judged.reason})",
                    flush=True,
                )
            for arm, auc in (("weak_plus_gold", mixed), ("gold_only", gold_only), ("weak_vs_gold", weak_only)):
                ratios[f"{arm}_k{k}"].append(auc / full)
                details.setdefault(f"{arm}_auc_k{k}", []).append(auc)
            details.setdefault(f"weak_weight_k{k}", []).append(choice.weight)
            details.setdefault(f"weak_weight_fold_auc_k{k}", []).append(choice.fold_auc)
            details.setdefault(f"label_source_k{k}", []).append(out.chosen)
            details.setdefault(f"coverage_k{k}", []).append(float(covered.mean()))
            print(
                f"[bench] {ds.NAME} split {s} k={k}%: full gold {full:.3f}  weak+gold {mixed:.3f} "
                f"(weak weight {choice.weight:g})  gold-only {gold_only:.3f}  weak-only {weak_only:.3f}"
                f"  ({out.chosen}, coverage {covered.mean():.1%}, {time.time() - t0:.0f} s)",
                flush=True,
            )
            if with_ablation and k in ABLATION_KS and _ablation_variants(lf_module, wp):
                y_pool = rest.loc[pool.index, gold_col].to_numpy().astype(int)
                for name, aucs in _ablation(gold, y, pool, y_pool, lf_module, wp).items():
                    ablation.setdefault(f"k{k}: {name}", []).append(list(aucs))
    return {"ratios": ratios, "details": details, "ablation": ablation}


def records(*parts: dict, suffix: str = "", ks: tuple[int, ...] = KS) -> list[Record]:
    """The records of the splits measured by one or more `measure` calls."""
    ratios: dict[str, list] = {}
    details: dict[str, list] = {}
    ablation: dict[str, list] = {}
    for part in parts:
        for merged, new in ((ratios, part["ratios"]), (details, part["details"]), (ablation, part["ablation"])):
            for key, values in new.items():
                merged.setdefault(key, []).extend(values)
    mean = {key: statistics.mean(v) for key, v in ratios.items()}
    curves = {arm: [mean[f"{arm}_k{k}"] for k in ks] for arm in ("weak_plus_gold", "gold_only", "weak_vs_gold")}
    table = {
        f"k{k}": {arm: round(curves[arm][i], 4) for arm in curves} | {"weak_weight": details[f"weak_weight_k{k}"]}
        for i, k in enumerate(ks)
    }
    out = []
    for k in ks:
        if f"self_train_k{k}" in ratios:
            mix = mean[f"weak_plus_gold_k{k}"]
            folds = [f for f in details[f"self_train_fold_auc_k{k}"] if f]
            out.append(
                Record(
                    f"self_train_k{k}{suffix}",
                    mean[f"self_train_k{k}"],
                    "ratio",
                    f">= {mix:.3f}",  # weak plus gold; kept only where it beats it beyond the splits' spread
                    {
                        "per_split": ratios[f"self_train_k{k}"],
                        "weak_plus_gold_per_split": ratios[f"weak_plus_gold_k{k}"],
                        "gain_per_split": [
                            round(a - b, 4) for a, b in zip(ratios[f"self_train_k{k}"], ratios[f"weak_plus_gold_k{k}"])
                        ],
                        "added": details[f"self_train_added_k{k}"],
                        "fold_gain": [round(f["on"] - f["off"], 4) for f in folds],
                    },
                )
            )
        per_k = {key: v for key, v in details.items() if key.endswith(f"_k{k}")}
        gold = mean[f"gold_only_k{k}"]
        out.append(
            Record(
                f"weak_plus_gold_k{k}{suffix}",
                mean[f"weak_plus_gold_k{k}"],
                "ratio",
                f">= {gold:.3f}",  # the weak labels must never hurt
                {"per_split": ratios[f"weak_plus_gold_k{k}"], **per_k, "full_gold_auc": details["full_gold_auc"]},
            )
        )
        out.append(Record(f"gold_only_k{k}{suffix}", gold, "ratio", "<= 1.0", {"per_split": ratios[f"gold_only_k{k}"]}))
        out.append(
            Record(
                f"weak_vs_gold_k{k}{suffix}",
                mean[f"weak_vs_gold_k{k}"],
                "ratio",
                ">= 0.95" if k == 5 else "<= 1.0",  # the original claim at 5%; the others are context
                {"per_split": ratios[f"weak_vs_gold_k{k}"], "gold_only": gold},
            )
        )
    savings, k_mix, k_gold = label_savings(curves["weak_plus_gold"], curves["gold_only"], ks)
    margins = {f"k{k}": curves["weak_plus_gold"][i] - curves["gold_only"][i] for i, k in enumerate(ks)}
    summary = {"table": table, "budget_weak_plus_gold": k_mix, "budget_gold_only": k_gold}
    if ablation:
        summary["labeling_ablation_dev_and_pool_auc"] = {
            name: [round(statistics.mean(a[0] for a in v), 4), round(statistics.mean(a[1] for a in v), 4)]
            for name, v in ablation.items()
        }
    out.append(Record(f"label_savings_at_95{suffix}", savings, "ratio", ">= 0.8", summary))
    worst = min(margins, key=margins.get)
    out.append(
        Record(
            f"weak_gold_margin_min{suffix}",
            margins[worst],
            "ratio",
            ">= 0.0",
            {"margins": margins, "at": worst},
        )
    )
    return out


def main(argv: list[str] | None = None) -> None:
    """Measure some splits into a JSON file, or merge such files into records (for running the
    splits as parallel processes; `python -m bench` runs them all in one)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--dataset", default=EMAILS)
    parser.add_argument("--splits", type=int, nargs="*", help="split ids to measure")
    parser.add_argument("--ks", type=int, nargs="*", default=list(KS), help="gold budgets (percent) to measure")
    parser.add_argument("--out", help="JSON file for the raw figures of --splits")
    parser.add_argument("--merge", nargs="*", help="raw JSON files to merge into records")
    parser.add_argument("--suffix", default="")
    parser.add_argument("--lf-options", default="{}", help="JSON keywords for make_lfs (an LF-development variant)")
    parser.add_argument("--no-ablation", action="store_true", help="skip the labeling-choice ablation")
    args = parser.parse_args(argv)
    if args.splits is not None:
        raw = measure(args.splits, args.dataset, tuple(args.ks), json.loads(args.lf_options), not args.no_ablation)
        with open(args.out, "w") as f:
            json.dump(raw, f)
    if args.merge:
        parts = [json.load(open(path)) for path in args.merge]
        recs = records(*parts, suffix=args.suffix, ks=tuple(args.ks))
        for r in recs:
            print(f"{r.name:<28}{r.value:>10.3f}  {r.goal:<10}{'pass' if r.passed else 'MISS'}")
        print(json.dumps([r.to_dict() for r in recs], default=str))


if __name__ == "__main__":
    main()
