"""The run summary (tasks/report.py writes it: summary.json, and summary.txt, what `make run` prints):
the outcome and each step's part from the typed step records (`build_summary`, pure), the text
(`render_text`), and its monitoring part: the run's alerts and its ledger so far, read from the
metrics store. The report step calls `run_monitoring` before its own task is recorded, so the cost
is that of the steps before it."""

from __future__ import annotations

from typing import Any

from tasks.core.log import log
from tasks.core.records import GateRecord, Record
from tasks.evaluation.quality import fmt_quality


def run_monitoring(settings: Any, params: Any, run_id: str) -> dict[str, Any] | None:
    """{alerts: [...], cost: {compute, storage, labor, avoided, waste, total}, currency, tasks} or None when
    monitoring is off; a store that cannot be read is a note, not a failed report."""
    if not params.monitoring.enabled:
        return None
    from tasks.monitoring.cost import totals
    from tasks.monitoring.store import MetricsStore

    try:
        store = MetricsStore.open(settings)
        alerts = [
            {k: a[k] for k in ("task", "rule", "severity", "message", "value", "threshold")}
            for a in store.alerts(run_id)
        ]
        return {
            "alerts": alerts,
            "cost": totals(store.costs(run_id)),
            "currency": params.cost.currency,
            "tasks": len(store.tasks(run_id)),
            "store": store.where,
        }
    except Exception as exc:  # noqa: BLE001 - the summary is written whatever the store's state
        log(f"monitoring: the run's alerts and costs could not be read ({type(exc).__name__}: {exc})")
        return {"error": f"{type(exc).__name__}: {exc}"}


def monitoring_lines(m: dict[str, Any] | None) -> list[str]:
    """The summary's lines: alerts first (marked), then the run's cost."""
    if not m:
        return []
    if "error" in m:
        return [f"  monitoring     store not readable: {m['error']}"]
    out = [f"  ALERT {a['severity']:<8} {a['rule']} [{a['task']}]: {a['message']}" for a in m["alerts"]]
    if not m["alerts"]:
        out.append("  alerts         none")
    c, cur = m["cost"], m["currency"]
    out.append(
        f"  cost           {cur} {c['total']:.4f} over {m['tasks']} tasks (compute {c['compute']:.4f}, labor "
        f"{c['labor']:.4f}); labor avoided {c['avoided']:.2f}; idle accelerator {c['waste']:.4f}"
    )
    return out


def outcome_of(steps: dict[str, Any], failed_steps: list[str], refused: dict[str, str] | None = None) -> str:
    if failed_steps:
        why = [f"{t} refused: {refused[t]}" for t in failed_steps if t in (refused or {})]
        return f"FAILED at {', '.join(failed_steps)}" + (f" ({'; '.join(why)})" if why else "")
    if "promote" in steps:
        return f"deployed {steps['promote'].prod_model}"
    if "rollback_canary" in steps:
        r = steps["rollback_canary"]
        back = f"; data pointer back to {r.current_data}" if r.data_rolled_back else ""
        return (
            f"canary of {r.model_version} rolled back ({'; '.join(r.reasons)}); prod stays "
            f"{r.champion or '(none)'}{back}"
        )
    if "reject_model" in steps:
        r = steps["reject_model"]
        back = f"; data pointer back to {r.current_data}" if r.rolled_back else ""
        return f"model rejected at {r.gate} ({'; '.join(r.reasons)}); prod stays {r.prod_model or '(none)'}{back}"
    if "quarantine" in steps:
        q = steps["quarantine"]
        return f"batch {q.batch_id} quarantined at {q.gate}; data version unchanged"
    if "ingest" in steps and steps["ingest"].status == "no_batch":
        return "no landing batch waiting: nothing to do"
    return "incomplete"


def build_summary(
    run_id: str,
    steps: dict[str, Any],
    registry_state: dict[str, Any],
    failed_steps: list[str],
    refused: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Pure: the summary dict from the typed step records."""
    ing, wl, snap = steps.get("ingest"), steps.get("weak_label"), steps.get("snapshot")
    tr, ev, cp = steps.get("train"), steps.get("evaluate"), steps.get("compress")

    def pick(rec: Record | None, *names: str) -> dict[str, Any] | None:
        return {n: getattr(rec, n) for n in names} if rec is not None else None

    return {
        "run_id": run_id,
        "outcome": outcome_of(steps, failed_steps, refused),
        "batch": {
            "id": ing.batch_id if ing else None,
            "rows_in": ing.rows if ing else None,
            "rows_labeled": (wl.rows - wl.abstained_rows) if wl else None,
            "rows_unlabeled": wl.abstained_rows if wl else None,
        },
        "labeling": {
            **pick(wl, "coverage", "chosen", "quality_dev", "n_lfs", "lf_table", "drift", "drift_compared_with"),
            "stats": wl.labeling_stats,
            **pick(wl, "mix", "gold_budget", "weak_weight", "weak_weight_choice", "label_counts", "feedback_gold"),
            **pick(wl, "embedding_lf"),
            "queue": pick(steps.get("fill_queue"), "added", "chosen", "random", "random_inclusion", "signals"),
        }
        if wl
        else None,
        "gates": {
            k: {"passed": steps[k].passed, "summary": steps[k].why}
            for k in ("validate_raw", "validate_labeled", "evaluate", "compress", "canary_analysis")
            if isinstance(steps.get(k), GateRecord)
        },
        "data_version": (snap.data_version if snap else None) or registry_state.get("current_data"),
        "data_version_rows": snap.total_rows if snap else None,
        "train": pick(
            tr,
            *("rows", "epochs", "world_size", "device", "final_loss", "seconds", "warm_start", "metrics"),
            *("strategy", "n_parameters", "pretrained", "inputs"),
        ),
        "test": pick(ev, "challenger", "champion", "champion_version"),
        "compression": compression_summary(cp),
        "registered": steps["register"].model_version if "register" in steps else None,
        "canary": pick(
            steps.get("canary_analysis"),
            "passed",
            "outcome",
            "champion_failing",
            "reasons",
            "champion",
            "model_version",
            "steps",
        ),
        "prod_model": registry_state.get("prod_model"),
        "quarantine": steps["quarantine"].model_dump() if "quarantine" in steps else None,
        "held": held_summary(steps, registry_state),
        "failed_steps": failed_steps,
    }


def held_summary(steps: dict[str, Any], registry_state: dict[str, Any]) -> dict[str, Any]:
    """The batches out of the data after this run (tasks/registry/held.py), what tonight held or
    quarantined (a rejected model's batches), what re-entered with tonight's snapshot, and the rows
    tonight held."""
    from tasks.registry.held import describe, held_batches

    rejection = steps.get("reject_model") or steps.get("rollback_canary")
    tonight = list(getattr(rejection, "held", None) or [])
    quarantined = list(getattr(rejection, "quarantined", None) or [])
    entries = held_batches(registry_state)
    rows = sum((entries.get(b, {}).get("partition") or {}).get("rows") or 0 for b in tonight + quarantined)
    snap = steps.get("snapshot")
    return {
        "batches": describe(registry_state),
        "tonight": tonight,
        "quarantined_tonight": quarantined,
        "rows_tonight": rows,
        "reentered": list(snap.reentered) if snap else [],
    }


def _start(pretrained: dict | None) -> str:
    """Where a training without a warm start began: pretrained weights (named, pinned) or scratch."""
    if not pretrained:
        return ", from scratch"
    fresh = ", ".join(pretrained["fresh"]) or "none"
    return f", from pretrained {pretrained['path']} (sha256 {pretrained['sha256'][:12]}; fresh: {fresh})"


def compression_summary(cp: Any) -> dict[str, Any] | None:
    """The compress step's choice: chain, size (and ratio to fp32), batch-1 latency, quality
    overall and on the worst slice (gold dev), test figures beside."""
    if cp is None:
        return None
    worst = None
    if cp.slices:
        ratios = [
            (q["roc_auc"] / cp.fp32_slices[k]["roc_auc"], k)
            for k, q in cp.slices.items()
            if q.get("roc_auc") == q.get("roc_auc") and (cp.fp32_slices.get(k) or {}).get("roc_auc")
        ]
        if ratios:
            _, k = min(ratios)
            worst = {"slice": k, "roc_auc": cp.slices[k]["roc_auc"], "fp32_roc_auc": cp.fp32_slices[k]["roc_auc"]}
    return {
        "passed": cp.passed,
        "chosen": cp.chosen,
        "chain": [c.get("kind") for c in cp.chain],
        "bytes": cp.bytes,
        "fp32_bytes": cp.fp32_bytes,
        "torch_bytes": cp.torch_bytes,
        "size_ratio": cp.bytes / cp.fp32_bytes if cp.bytes else None,
        "latency_b1_ms": cp.latency_b1_ms,
        "fp32_latency_b1_ms": cp.fp32_latency_b1_ms,
        "quality": cp.quality,
        "fp32_quality": cp.fp32_quality,
        "worst_slice": worst,
        "test": cp.test,
        "fp32_test": cp.fp32_test,
        "parity_max_abs": cp.parity_max_abs,
        "table": cp.table,
        "plot": cp.plot,
        "seconds": cp.seconds,
    }


def compression_lines(c: dict[str, Any] | None) -> list[str]:
    if not c:
        return []
    if not c["chosen"]:
        return [f"  compressed     none chosen; fp32 ONNX {c['fp32_bytes']:,} B  (table {c['table']})"]
    worst = c["worst_slice"]
    worst_text = (
        f", worst slice {worst['slice']} {worst['roc_auc']:.3f} (fp32 {worst['fp32_roc_auc']:.3f})" if worst else ""
    )
    return [
        f"  compressed     {c['chosen']}: {c['bytes']:,} B ({c['size_ratio']:.2f} x fp32 {c['fp32_bytes']:,} B), "
        f"batch-1 {c['latency_b1_ms']:.3f} ms (fp32 {c['fp32_latency_b1_ms']:.3f} ms)",
        f"                 dev ROC AUC {c['quality']['roc_auc']:.3f} (fp32 {c['fp32_quality']['roc_auc']:.3f})"
        f"{worst_text}; test {fmt_quality(c['test'])}  (parity {c['parity_max_abs']:.1e})",
    ]


def training_label_lines(lab: dict[str, Any]) -> list[str]:
    """How many gold and weak labels of this batch train the model, and what the weak ones added on the
    gold dev folds (mean ROC AUC at the chosen weak weight vs without weak labels)."""
    counts = lab.get("label_counts")
    if not counts:
        return []
    gold, weak, none = counts["gold"], counts["weak"], counts["none"]
    line = (
        f"  train labels   {lab['mix']}: {gold['training_rows']:.0f} gold (budget {lab['gold_budget']:.0%}), "
        f"{weak['training_rows']:.0f} weak at weight {lab['weak_weight']:g}, {none['rows']:.0f} unlabeled"
    )
    total = gold["weight"] + weak["weight"]
    if total:
        line += f"; share of the loss weight: gold {gold['weight'] / total:.0%}, weak {weak['weight'] / total:.0%}"
    lines = [line]
    choice = lab.get("weak_weight_choice") or {}
    auc = choice.get("fold_auc") or {}
    if auc and "0" in auc:
        chosen = auc.get(f"{lab['weak_weight']:g}", float("nan"))
        lines.append(
            f"                 on {choice['folds']} gold dev folds: ROC AUC {chosen:.3f} with weak labels vs "
            f"{auc['0']:.3f} on the gold rows alone ({chosen - auc['0']:+.3f} from the weak labels; by weight: "
            + ", ".join(f"{w}: {v:.3f}" for w, v in auc.items())
            + ")"
        )
        if choice.get("fold_se"):  # why this weight: the one-standard-error rule's reasoning
            lines.append(f"                 chosen because: {choice['reason']}")
    elif choice.get("reason"):
        lines.append(f"                 weak weight: {choice['reason']}")
    fb = lab.get("feedback_gold")
    if fb:  # /v1/feedback labels made gold tonight (tasks/labeling/feedback.py)
        line = (
            f"  feedback gold  {fb.get('gold_version') or 'no new gold version'}: {fb['accepted']} accepted "
            f"({fb['conflicts']} conflicting), {fb['refused']} refused, {fb['pending']} pending"
        )
        if fb.get("used") and "dev_rows" in fb:
            sources = ", ".join(f"{k} {v}" for k, v in fb.get("by_source", {}).items())
            line += (
                f"; gold through {fb['used_through']}" + (f" ({sources})" if sources else "")
                + f": {fb['dev_rows']} in the dev set, {fb['batch_rows_gold'] + fb['appended_rows']} training"
            )  # fmt: skip
        elif not fb.get("used"):
            line += "; not used (weak_label.feedback_gold or mix)"
        lines.append(line)
    q = lab.get("queue")
    if q:  # the rows fill_queue put into the labeling queue (tasks/labeling/queue.py)
        line = f"  labeling queue {q['added']} row(s) queued: {q['chosen']} chosen by {'+'.join(q['signals'])}"
        if q["random"]:
            line += f", {q['random']} at random (inclusion {q['random_inclusion']:.4f}, weight 1/that)"
        lines.append(line)
    return lines


def held_lines(h: dict[str, Any]) -> list[str]:
    """The summary's lines about held batches: re-entered tonight, and every batch still out."""
    lines = []
    if h.get("reentered"):
        lines.append(f"  re-entered     {', '.join(h['reentered'])} (held batches, back with their stored labels)")
    for b in h.get("batches", []):
        lines.append(
            f"  held batch     {b['batch_id']} {b['status']} (from {b['from_version']}): {b['why']}; {b['next']}"
        )
    return lines


def trigger_summary(causes: list[dict[str, Any]], steps: dict[str, Any]) -> dict[str, Any] | None:
    """Why an Asset-triggered run ran: the sluice_serving_drift events' extras (an Asset-triggered run
    has no conf: the cause travels in the event), and the data version a run with no new batch
    retrained on (drift_retrain). None: a run of the cron or a manual one."""
    if not causes:
        return None
    retrain = steps.get("drift_retrain")
    return {"serving_drift": causes, "retrained_on": retrain.data_version if retrain else None}


def trigger_lines(t: dict[str, Any] | None) -> list[str]:
    if not t:
        return []
    lines = []
    for c in t["serving_drift"]:
        lines.append(
            f"  trigger        serving drift {c.get('window_start', '?')} .. {c.get('window_end', '?')} "
            f"(monitor_serving run {c.get('run_id', '?')}): {c.get('why', 'no cause in the event')}"
        )
    if t["retrained_on"]:
        lines.append(f"  retrain        no new batch: retrained on the current data version {t['retrained_on']}")
    return lines


def render_text(s: dict[str, Any]) -> str:
    lines = [f"Sluice nightly run {s['run_id']}", f"  outcome        {s['outcome']}"]
    lines += trigger_lines(s.get("trigger"))
    b = s["batch"]
    if b["id"]:
        lines.append(
            f"  batch          {b['id']}: {b['rows_in']} rows in, {b['rows_labeled']} labeled, "
            f"{b['rows_unlabeled']} left unlabeled (every LF abstained)"
        )
    if s["labeling"]:
        lab, q = s["labeling"], s["labeling"]["quality_dev"]
        lines.append(
            f"  labeling       {lab['n_lfs']} LFs, coverage {lab['coverage']:.1%}; on gold dev: "
            f"label model {fmt_quality(q['label_model'])} | majority vote {fmt_quality(q['majority_vote'])}"
            f" -> using {lab['chosen']}"
        )
        if lab.get("embedding_lf"):
            lines.append(f"  embedding LF   {lab['embedding_lf']['reason']}")
        names = s.get("classes") or []  # label k's name (older summaries: its number)
        table = lab["lf_table"] or []
        votes = ["/".join(names[v] if v < len(names) else str(v) for v in r["polarity"]) or "-" for r in table]
        width = max([6, *(len(v) + 1 for v in votes)])
        lines.append(f"  {'LF':<22}{'votes':>{width}}{'coverage':>10}{'overlaps':>10}{'conflicts':>10}{'dev acc':>9}")
        for r, v in zip(table, votes):
            acc = "n/a" if r["dev_accuracy"] is None else f"{r['dev_accuracy']:.3f}"
            shares = f"{r['coverage']:>10.3f}{r['overlaps']:>10.3f}{r['conflicts']:>10.3f}"
            lines.append(f"  {r['lf']:<22}{v:>{width}}{shares}{acc:>9}")
        lines += training_label_lines(lab)
        if lab["drift"]:
            lines += [f"  DRIFT vs {lab['drift_compared_with']}: {flag}" for flag in lab["drift"]]
        elif lab["drift_compared_with"]:
            lines.append(f"  drift          none beyond thresholds vs {lab['drift_compared_with']}")
    for name, g in s["gates"].items():
        detail = g["summary"]
        lines.append(
            f"  gate {name:<17}{'pass' if g['passed'] else 'FAIL'}  {detail.splitlines()[0] if detail else 'ok'}"
        )
    lines.append(
        f"  data version   {s['data_version'] or '(none)'}"
        + (f" ({s['data_version_rows']} rows)" if s["data_version_rows"] else "")
    )
    lines += held_lines(s.get("held") or {})
    if s["train"]:
        t = s["train"]
        lines.append(
            f"  train          {t['rows']} rows, {t['epochs']} epochs x {t['world_size']} processes"
            + (f" ({t['strategy']}, {t['n_parameters'] / 1e6:.1f}M parameters)" if t.get("strategy") else "")
            + f", final loss {t['final_loss']:.4f}"
            + (f", warm start from {t['warm_start']}" if t.get("warm_start") else _start(t.get("pretrained")))
        )
        inputs = t.get("inputs")
        if inputs:
            lines.append(
                f"  train inputs   tokenizer sha256 {inputs['tokenizer_sha256'][:12]}, max_len {inputs['max_len']}: "
                f"{inputs['truncated_texts']} of {inputs['texts']} texts cut there"
                + (
                    f"; frozen encoder's embeddings cached ({inputs['embedding_cache'][:12]})"
                    if inputs.get("embedding_cache")
                    else ""
                )
            )
        if t.get("metrics"):
            m = t["metrics"]
            spread = (
                f", grad variance across processes {m['median_grad_var_relative']:.2f} x |g|^2"
                if "median_grad_var_relative" in m
                else ""
            )
            lines.append(
                f"  train metrics  {m['median_samples_per_s']:,.0f} samples/s, grad norm "
                f"{m['last_grad_norm']:.3g}, update/weight {m['last_update_to_weight']:.2g}{spread}, "
                f"peak RSS {m['peak_rss_mb']:.0f} MB"
            )
    if s["test"]:
        lines.append(f"  test (gold)    challenger {fmt_quality(s['test']['challenger'])}")
        if s["test"]["champion"]:
            lines.append(
                f"                 champion {s['test']['champion_version']} {fmt_quality(s['test']['champion'])}"
            )
    lines += compression_lines(s.get("compression"))
    lines.append(f"  registered     {s['registered'] or '(none this run)'}")
    lines += canary_lines(s.get("canary"))
    lines.append(f"  prod model     {s['prod_model'] or '(none)'}")
    if s["quarantine"]:
        lines.append(f"  quarantine     {s['quarantine']['path']}")
    lines += monitoring_lines(s.get("monitoring"))
    return "\n".join(lines) + "\n"


def canary_lines(c: dict[str, Any] | None) -> list[str]:
    """The canary in the summary: per step the weight, requests per variant, what was compared, the verdict."""
    if not c:
        return []
    if not c["steps"]:
        return [
            f"  canary         {'none: first model, promoted directly' if c['passed'] else '; '.join(c['reasons'])}"
        ]
    verdict = {"challenger_worse": "challenger worse", "cannot_judge": "cannot judge"}.get(c.get("outcome") or "")
    out = [
        f"  canary         {c['model_version']} vs champion {c['champion']}: "
        f"{'PROMOTE' if c['passed'] else 'ROLL BACK' + (f' ({verdict})' if verdict else '')}"
        + ("; the CHAMPION is failing its own requests" if c.get("champion_failing") else "")
    ]
    for st in c["steps"]:
        m = st["metrics"]
        again = f" (measured again: attempt {st['attempt']})" if st.get("attempt", 1) > 1 else ""
        ch, cl = m.get("champion", {}), m.get("challenger", {})
        auc = (m.get("quality") or {}).get("roc_auc") or {}
        online = (
            f", online AUC {auc.get('challenger', 0):.3f} vs {auc.get('champion', 0):.3f} "
            f"(CI of diff [{auc.get('ci_low', 0):.3f}, {auc.get('ci_high', 0):.3f}])"
            if auc
            else ""
        )
        out.append(
            f"    at {st['weight']:>3}%{again}  requests {ch.get('requests', 0)}/{cl.get('requests', 0)} "
            f"(champion/challenger), errors {ch.get('errors', 0)}/{cl.get('errors', 0)}, "
            f"p99 {ch.get('p99_ms') or 0:.1f}/{cl.get('p99_ms') or 0:.1f} ms, PSI {m.get('psi') or 0:.3f}{online}: "
            f"{'pass' if st['passed'] else 'FAIL: ' + '; '.join(st['reasons'])}"
        )
    return out
