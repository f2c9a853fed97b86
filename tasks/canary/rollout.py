"""The canary rollout: every weight change of a release, in one place.

    start        the challenger beside the champion at the first weight of `canary.steps`
                 (deploy_canary); with no champion yet the first model is promoted directly
    run_canary   each weight of `canary.steps` in turn: set it, wait until the running server
                 serves it, send traffic (the replay client on the embedded default), judge the
                 canary's window of the prediction log (analysis.py); stop at the first failed step
    analyse      run_canary against the server in $SLUICE_HOME, failing closed without one (canary_analysis)
    retire       the challenger retired, the data pointer back to the champion's lineage (rollback_canary)

(A passed canary ends in the registry's `promote`, which makes the challenger the champion.)

The server follows the registry's serving state by itself; this module changes that state only
through the registry and reads what the server reports (`GET /v1/serving`) and logs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import httpx
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from tasks.core.log import Progress, log
from tasks.core.params import CanaryParams, Params
from tasks.core.settings import Settings
from tasks.registry import Registry

WHO = "nightly_pipeline"


class RolloutError(RuntimeError):
    """The rollout cannot proceed (no server, the server does not take the new state)."""


@dataclass(frozen=True)
class Release:
    """What `start` did: the challenger at `weight`, or (no champion yet) promoted directly."""

    model_version: str
    champion: str | None
    weight: int
    promoted_directly: bool


@dataclass
class StepOutcome:
    weight: int
    passed: bool
    reasons: list[str]
    metrics: dict[str, Any]
    traffic: dict[str, Any]
    seconds: float
    attempt: int = 1  # a failing step is measured again (canary.failures_before_rollback)
    outcome: str = "pass"
    """analysis.PASS, CHALLENGER_WORSE or CANNOT_JUDGE."""
    champion_failing: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "weight": self.weight,
            "attempt": self.attempt,
            "passed": self.passed,
            "outcome": self.outcome,
            "champion_failing": self.champion_failing,
            "reasons": self.reasons,
            "metrics": self.metrics,
            "traffic": self.traffic,
            "seconds": round(self.seconds, 2),
        }


@dataclass
class Rollout:
    passed: bool
    steps: list[StepOutcome] = field(default_factory=list)
    refused: str | None = None
    """Why the canary could not be judged at all (no server, or one that does not follow)."""

    @property
    def outcome(self) -> str:
        """The verdict: pass, challenger_worse, or cannot_judge (no server, too few answers, or a champion
        failing its own requests): the last step's, which decided."""
        if self.refused is not None:
            return "cannot_judge"
        return self.steps[-1].outcome if self.steps else ("pass" if self.passed else "cannot_judge")

    @property
    def champion_failing(self) -> bool:
        return any(s.champion_failing for s in self.steps)

    @property
    def reasons(self) -> list[str]:
        if self.refused is not None:
            return [self.refused]
        return [f"at {s.weight}% (attempt {s.attempt}): {r}" for s in self.steps if not s.passed for r in s.reasons]


def start(
    registry: Registry, canary: CanaryParams, version: str, champion: str | None, data_version: str, run_id: str
) -> Release:
    """`version` beside `champion` at the first weight of `canary.steps`; with no champion, promoted.

    Compare-and-set: the registry must still hold `champion` as prod and `data_version` as the
    current data (what this run compared with and trained on), else RegistryError and no change."""
    if champion is None:
        registry.promote(
            version,
            reason=f"nightly run {run_id}: first model, no champion to compare with",
            who=WHO,
            expect_champion=None,
            expect_data=data_version,
        )
        log(f"no champion yet: {version} promoted directly")
        return Release(version, None, 100, promoted_directly=True)
    weight = canary.steps[0]
    registry.start_canary(
        version,
        weight,
        reason=f"nightly run {run_id}: canary of {version} vs {champion}",
        who=WHO,
        expect_champion=champion,
        expect_data=data_version,
    )
    log(f"canary: {version} beside champion {champion} at {weight}% of traffic")
    return Release(version, champion, weight, promoted_directly=False)


def retire(
    registry: Registry,
    challenger: str,
    champion: str | None,
    data_version: str,
    why: str,
    quarantine_after: int | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Retire `challenger` (only that one: another challenger in place is refused) and put the data
    pointer back to the champion's lineage, if the prod model is still `champion` and the current
    data still `data_version`; the batches it leaves out are held (tasks/registry/held.py;
    `quarantine_after` None: the challenger was not judged, the hold is no rejection).
    -> (the registry state after, rollback_to_prod_lineage's result)."""
    registry.rollback_canary(reason=why, who=WHO, expect_challenger=challenger)
    rolled = registry.rollback_to_prod_lineage(
        why, who=WHO, expect_prod=champion, expect_data=data_version, quarantine_after=quarantine_after
    )
    state = registry.state()
    log(
        f"canary rolled back: {challenger} retired, {state['prod_model']} serves 100%, "
        f"data pointer {state['current_data']}"
    )
    return state, rolled


def served(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """What the server says it serves now (`GET /v1/serving`)."""
    r = httpx.get(f"{url}/v1/serving", timeout=timeout_s)
    r.raise_for_status()
    return r.json()


def _serves(now: dict[str, Any], champion: str, challenger: str | None, weight: int) -> bool:
    v = now.get("variants", {})
    return (
        not now.get("pending")
        and v.get("champion", {}).get("model_version") == champion
        and (
            challenger is None
            or (v.get("challenger", {}).get("model_version") == challenger and now.get("challenger_weight") == weight)
        )
    )


def wait_until_served(
    url: str,
    champion: str,
    challenger: str | None,
    weight: int,
    timeout_s: float,
    replicas: Callable[[], dict[str, str]] = dict,
) -> dict:
    """Poll the server until it has loaded `champion` (and `challenger` at `weight`), or fail naming what it serves.

    `replicas()`: {name: url} of the replicas behind the balancer at `url` (read again each poll: the
    set may scale). Then every replica is asked itself, and all must serve it: replicas that still
    disagree at `timeout_s` fail the canary closed, naming what each serves."""
    last: dict[str, Any] = {}
    each: dict[str, Any] = {}

    def ask(u: str) -> dict[str, Any]:
        try:
            return served(u)
        except httpx.HTTPError as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    def probe() -> bool:
        nonlocal last, each
        behind = replicas()
        if behind:
            each = {name: ask(u) for name, u in sorted(behind.items())}
            last = next(iter(each.values()))
            return all(_serves(v, champion, challenger, weight) for v in each.values())
        each = {}
        last = ask(url)
        return _serves(last, champion, challenger, weight)

    Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(0.2),
        retry=retry_if_result(lambda ok: not ok),
        retry_error_callback=lambda _: False,
    )(probe)
    if each and not all(_serves(v, champion, challenger, weight) for v in each.values()):
        raise RolloutError(
            f"the replicas behind {url} disagree on what they serve after {timeout_s:.0f} s (wanted champion "
            f"{champion}"
            + (f" + challenger {challenger} at {weight}%" if challenger else "")
            + "): "
            + "; ".join(f"{name} serves {describe_served(v)}" for name, v in each.items())
        )
    if not each and not _serves(last, champion, challenger, weight):
        raise RolloutError(
            f"the model server at {url} does not serve champion {champion}"
            + (f" + challenger {challenger} at {weight}%" if challenger else "")
            + f" after {timeout_s:.0f} s; it reports {last}"
        )
    return last


def describe_served(now: dict[str, Any]) -> str:
    """One replica's /v1/serving answer in a few words (or its error)."""
    if "error" in now:
        return f"nothing it could say ({now['error']})"
    v = now.get("variants", {})
    parts = [f"{name} {m.get('model_version')}" for name, m in v.items()]
    if "challenger" in v:
        parts.append(f"{now.get('mode')} {now.get('challenger_weight')}%")
    return ", ".join(parts) + (" (loading)" if now.get("pending") else "") if parts else "nothing"


def set_weight(registry: Registry, weight: int, step: int, steps: int) -> None:
    """The challenger's share of traffic for one step (the first is already set by `start`)."""
    if registry.serving().challenger_weight != weight:
        registry.set_canary_weight(weight, reason=f"canary step {step}/{steps}", who=WHO)


def run_canary(
    settings: Settings, params: Params, dataset: ModuleType, champion: str, challenger: str, url: str
) -> Rollout:
    """Walk `params.canary.steps` (the challenger already beside the champion); stop at the first failed
    step. A failing step is measured again with fresh traffic until it fails
    `canary.failures_before_rollback` times in a row (each attempt is in the evidence, and each is
    judged on all the canary's traffic so far): one noisy window cannot decide alone."""
    from tasks.serving.paths import replica_urls

    c, registry = params.canary, Registry(settings)
    rollout, started, sent = Rollout(passed=True), time.time(), 0
    tracker = Progress(f"canary {challenger} vs {champion}", len(c.steps), unit="weight step", every_s=0)
    for i, weight in enumerate(c.steps):
        set_weight(registry, weight, i + 1, len(c.steps))
        wait_until_served(
            url,
            champion,
            challenger,
            weight,
            timeout_s=max(30.0, params.serving.poll_s * 20),
            replicas=lambda: replica_urls(settings.home),
        )
        for attempt in range(1, c.failures_before_rollback + 1):
            outcome = _measure(settings, params, (champion, challenger), url, dataset, weight, sent, started)
            outcome.attempt, sent = attempt, sent + outcome.traffic.get("sent", c.requests_per_step)
            rollout.steps.append(outcome)
            failed = outcome.traffic.get("failed_by_variant") or {}
            log(
                f"canary step {i + 1}/{len(c.steps)} at {weight}% (attempt {attempt}/{c.failures_before_rollback}): "
                f"{outcome.traffic.get('sent')} requests ({outcome.traffic.get('failed')} failed"
                + "".join(f", {n} {v}" for v, n in sorted(failed.items()))
                + f"), {'PASS' if outcome.passed else outcome.outcome.upper() + ': ' + '; '.join(outcome.reasons)}"
            )
            if outcome.passed:
                break
        tracker.update(i + 1)
        if not outcome.passed:
            rollout.passed = False
            break
    return rollout


def _measure(
    settings: Settings,
    params: Params,
    variants: tuple[str, str],
    url: str,
    dataset: Any,
    weight: int,
    offset: int,
    started: float,
) -> StepOutcome:
    """One attempt at one weight: replay traffic, then judge everything the canary sent so far (the
    champion's earlier traffic is the comparison at 100%, and online quality needs every label there is)."""
    from tasks.canary.analysis import CANNOT_JUDGE, MAX_CAUSES, judge, select_window
    from tasks.canary.replay import replay_gold
    from tasks.serving.paths import prediction_log
    from tasks.serving.predlog import read_log

    c, (champion, challenger), t0 = params.canary, variants, time.time()
    traffic = replay_gold(
        url,
        count=c.requests_per_step,
        rate=c.replay_rate,
        home=settings.home,
        dataset=dataset,
        feedback_delay_s=0.0,
        offset=offset,
    )
    # Every replica writes its chunk of the shared log every log_flush_s: the last feedback is in it after that.
    time.sleep(params.serving.log_flush_s + 0.3)
    window = select_window(
        read_log(prediction_log(settings), start=started),
        start=started,
        model_versions={"champion": champion, "challenger": challenger},
    )
    verdict = judge(window, c)
    reasons, outcome = list(verdict.reasons), verdict.outcome
    unanswered = (traffic.failed_by_variant or {}).get("none", 0)
    if unanswered:  # refused or lost before a variant took them: nothing in the log says so
        reasons.append(
            f"{unanswered} of {traffic.sent} replayed requests failed before any variant answered "
            f"({'; '.join(traffic.errors[:MAX_CAUSES])}): cannot judge"
        )
        outcome = CANNOT_JUDGE
    return StepOutcome(
        weight,
        not reasons,
        reasons,
        verdict.metrics,
        traffic.to_dict(),
        time.time() - t0,
        outcome=outcome,
        champion_failing=verdict.champion_failing,
    )


def analyse(settings: Settings, params: Params, dataset: ModuleType, champion: str, challenger: str) -> Rollout:
    """`run_canary` against the server whose address is in $SLUICE_HOME; no server there, or one that
    does not follow the registry, fails closed (a Rollout that did not pass, with the reason)."""
    from tasks.serving.paths import server_url

    try:
        return run_canary(settings, params, dataset, champion, challenger, server_url(settings.home))
    except (RolloutError, FileNotFoundError) as exc:
        log(f"canary cannot be judged: {exc}")
        return Rollout(passed=False, refused=f"canary cannot be judged: {exc}")
