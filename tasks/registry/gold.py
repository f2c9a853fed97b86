"""Gold labels from feedback: `gold-vN` tags beside the data versions, each the labels that version added.

    gold/labels/gold-vN.jsonl      the gold labels version N accepted, one JSON line each (git-tracked)
    gold/refused/gold-vN.jsonl     what it refused, each with its reason (nothing is dropped silently)
    gold/versions/gold-vN.json     parent, counts, conflicts, when

A gold label: {"row_id", "label", "source": "feedback", "who", "at", "ts", "request_id", "row",
"served_version", "replica", "raw" (the served raw row), "gold_version", "conflict", "conflicts_with"}.

A version only ever adds: a label is never edited or removed. A label that contradicts an earlier
gold label for the same row (or a label the caller names as known, e.g. the gold dev set's) is kept
with `conflict: true` and the labels it contradicts; `gold_rows` then leaves that row out (every
label of a row must agree) and lists it among the conflicts: a conflicted row trains nowhere and
joins no dev set (docs/training.md "Feedback gold").

A label can be retracted (`retract_gold`, the labeling queue's undo): a new version names it in
gold/retracted/gold-vN.jsonl with who and why; it stays in its own version's file, and `gold_labels`
leaves it out from then on.

Refused, with the reason: a row of the gold test set ("gold, test"), a label outside the classes,
a label without a row id, and the same feedback record a second time (an earlier version has it).
Everything is written in one transaction whose tag is the commit point (repo.py): a killed one
leaves no version and no file behind.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, Iterable

from tasks.core.files import atomic_write_json, atomic_write_text
from tasks.core.log import log
from tasks.registry.repo import RegistryError, RepoBase

GOLD_VERSION = re.compile(r"^gold-v([1-9][0-9]{0,8})$")
FEEDBACK = "feedback"
TEST_REFUSAL = "gold, test"


def is_gold_version(name: str) -> bool:
    return bool(GOLD_VERSION.match(name or ""))


def gold_number(name: str) -> int:
    m = GOLD_VERSION.match(name or "")
    if not m:
        raise RegistryError(f"{name!r} is not a gold version (expected gold-v<N>, e.g. gold-v3)")
    return int(m.group(1))


def feedback_key(item: dict[str, Any]) -> str:
    """One feedback record's identity: its request id, row and time (the same record read twice)."""
    return f"{item.get('request_id')}|{item.get('row')}|{item.get('ts')}"


class GoldStore(RepoBase):
    # ---- reading ----------------------------------------------------------------------------------
    def gold_versions(self) -> list[str]:
        if not (self.root / ".git").is_dir():
            return []
        names = [t for t in self.git("tag", "--list", "gold-v*").splitlines() if is_gold_version(t)]
        return sorted(names, key=gold_number)

    def gold_version_info(self, version: str) -> dict[str, Any]:
        gold_number(version)
        if version not in self.gold_versions():
            raise RegistryError(f"gold version {version} does not exist (have: {self.gold_versions() or 'none'})")
        return json.loads(self.git("show", f"{version}:gold/versions/{version}.json"))

    def _lines(self, version: str, kind: str) -> list[dict[str, Any]]:
        text = self.git("show", f"{version}:gold/{kind}/{version}.jsonl")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _retracted_lines(self, version: str) -> list[dict[str, Any]]:
        """A version's retractions (gold/retracted/, written only by `retract_gold`; none before it)."""
        text = self.git("show", f"{version}:gold/retracted/{version}.jsonl", check=False)
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _upto(self, version: str | None) -> list[str]:
        versions = self.gold_versions()
        if version is not None:
            gold_number(version)
            if version not in versions:
                raise RegistryError(f"gold version {version} does not exist (have: {versions or 'none'})")
            versions = versions[: versions.index(version) + 1]
        return versions

    def gold_labels(self, version: str | None = None) -> list[dict[str, Any]]:
        """Every gold label up to `version` (default: the latest), oldest first, as committed at the tags,
        less the labels a later version (up to `version`) retracted (`gold_retracted` keeps those)."""
        versions = self._upto(version)
        gone = {r["request_id"] for r in self.gold_retracted(versions[-1] if versions else None)}
        return [lab for v in versions for lab in self._lines(v, "labels") if lab.get("request_id") not in gone]

    def gold_retracted(self, version: str | None = None) -> list[dict[str, Any]]:
        """Every retraction up to `version`: {request_id, row_id, label, gold_version, who, at, reason}."""
        versions = self._upto(version) if version is not None else self.gold_versions()
        return [r for v in versions for r in self._retracted_lines(v)]

    def retraction_of(self, request_id: str) -> str | None:
        """The gold version that retracted `request_id`'s label, or None (not retracted)."""
        for v in self.gold_versions():
            if any(str(r["request_id"]) == str(request_id) for r in self._retracted_lines(v)):
                return v
        return None

    def gold_refused(self, version: str | None = None) -> list[dict[str, Any]]:
        versions = self.gold_versions()
        if version is not None:
            versions = versions[: versions.index(version) + 1]
        return [item for v in versions for item in self._lines(v, "refused")]

    def gold_rows(self, version: str | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict]]]:
        """(row id -> its gold label, the latest record of it, where every label of the row agrees;
        row id -> all its labels, where they contradict: conflicted rows, left out of the first)."""
        by_row: dict[str, list[dict[str, Any]]] = {}
        for label in self.gold_labels(version):
            by_row.setdefault(str(label["row_id"]), []).append(label)
        agreed, conflicted = {}, {}
        for row_id, labels in by_row.items():
            if len({lab["label"] for lab in labels}) == 1 and not any(lab.get("conflict") for lab in labels):
                agreed[row_id] = labels[-1]
            else:
                conflicted[row_id] = labels
        return agreed, conflicted

    # ---- writing ----------------------------------------------------------------------------------
    def add_gold(
        self,
        candidates: Iterable[dict[str, Any]],
        *,
        classes: Iterable[int],
        test_ids: Iterable[Any],
        known: dict[str, int] | None = None,
        refused: Iterable[dict[str, Any]] = (),
        until_ts: float | None = None,
        who: str | None = None,
    ) -> dict[str, Any]:
        """Add feedback gold labels as a new gold version (one transaction, tagged `gold-vN`).

        candidates: {"row_id", "label", "who", "at", "ts", "request_id", "row", "served_version",
        "replica", "raw"}; classes: the labels allowed; test_ids: the gold test set's row ids (refused,
        "gold, test"); known: row id -> a gold label held elsewhere (the dev set), checked for
        contradiction like earlier versions; refused: what the caller already refused (unjoined
        feedback), recorded with this version. Returns {"gold_version" (None when there was nothing to
        record), "accepted", "refused", "conflicts"}: every candidate is in exactly one of the first two.
        """
        classes = sorted({int(c) for c in classes})
        tests = {str(t) for t in test_ids}
        known = {str(k): int(v) for k, v in (known or {}).items()}
        candidates = sorted(candidates, key=lambda c: (c.get("ts") or 0.0, str(c.get("request_id")), c.get("row")))
        refused = [dict(r) for r in refused]
        with self.transaction():
            versions = self.gold_versions()
            earlier = self.gold_labels() if versions else []
            seen = {feedback_key(x) for x in earlier} | {feedback_key(x) for x in self.gold_refused()}
            seen |= {r["key"] for r in self.gold_retracted()}  # a retracted record is not taken again
            labels_of: dict[str, list[dict[str, Any]]] = {}
            for lab in earlier:
                labels_of.setdefault(str(lab["row_id"]), []).append(lab)
            version = f"gold-v{gold_number(versions[-1]) + 1 if versions else 1}"
            accepted: list[dict[str, Any]] = []
            refused = [r for r in refused if feedback_key(r) not in seen]
            seen |= {feedback_key(r) for r in refused}
            for cand in candidates:
                reason = self._refusal(cand, classes, tests, seen)
                if reason:
                    if reason != "duplicate":  # the same record already recorded by an earlier version
                        refused.append({**_brief(cand), "reason": reason})
                    continue
                seen.add(feedback_key(cand))
                row_id = str(cand["row_id"])
                before = [
                    {k: lab.get(k) for k in ("label", "gold_version", "request_id", "at", "source", "who")}
                    for lab in labels_of.get(row_id, [])
                    if lab["label"] != int(cand["label"])
                ]
                if row_id in known and known[row_id] != int(cand["label"]):
                    before.append({"label": known[row_id], "gold_version": None, "source": "gold dev set"})
                label = {
                    **{k: cand.get(k) for k in ("who", "at", "ts", "request_id", "row", "served_version", "replica")},
                    "row_id": cand["row_id"],
                    "label": int(cand["label"]),
                    "source": cand.get("source") or FEEDBACK,
                    "raw": cand.get("raw"),
                    **({"queue": cand["queue"]} if cand.get("queue") is not None else {}),
                    "gold_version": version,
                    "conflict": bool(before),
                    "conflicts_with": before,
                }
                accepted.append(label)
                labels_of.setdefault(row_id, []).append(label)
            conflicts = [lab for lab in accepted if lab["conflict"]]
            result = {"accepted": accepted, "refused": refused, "conflicts": conflicts}
            if not accepted and not refused:
                log("gold: no new feedback to record; no gold version made")
                return {"gold_version": None, **result}
            info = {
                "version": version,
                "parent": versions[-1] if versions else None,
                "created_at": datetime.now(timezone.utc).isoformat(),
                "until_ts": until_ts,
                "accepted": len(accepted),
                "refused": len(refused),
                "conflicts": [
                    {"row_id": c["row_id"], "label": c["label"], "with": c["conflicts_with"]} for c in conflicts
                ],
                "refused_by_reason": _count(r["reason"] for r in refused),
            }
            base = self.root / "gold"
            atomic_write_text(base / "labels" / f"{version}.jsonl", _jsonl(accepted))
            atomic_write_text(base / "refused" / f"{version}.jsonl", _jsonl(refused))
            atomic_write_json(base / "versions" / f"{version}.json", info)
            self._audit(
                "gold",
                who=who,
                gold_version=version,
                accepted=len(accepted),
                refused=len(refused),
                conflicts=len(conflicts),
            )
            commit = self._commit(
                f"{version}: {len(accepted)} feedback gold label(s), {len(conflicts)} conflicting, "
                f"{len(refused)} refused",
                tag=version,
            )
            log(f"registry: {version} tagged at {commit[:10]}: {len(accepted)} gold, {len(refused)} refused")
            return {"gold_version": version, "commit": commit, **result}

    def retract_gold(self, request_ids: Iterable[str], *, who: str, reason: str) -> dict[str, Any]:
        """Retract gold labels (by request id) as a new gold version: nothing is deleted, the version's
        gold/retracted/ file names each label with who retracted it, when and why, and `gold_labels`
        leaves them out from that version on (a queue label's undo, tasks/labeling/queue.py). A request
        id that names no live label is refused (RegistryError), and nothing is written."""
        wanted = [str(r) for r in request_ids]
        if not wanted:
            raise RegistryError("nothing to retract: no request id given")
        if not reason:
            raise RegistryError("a retraction needs a reason")
        with self.transaction():
            versions = self.gold_versions()
            live = {str(lab.get("request_id")): lab for lab in (self.gold_labels() if versions else [])}
            missing = [r for r in wanted if r not in live]
            if missing:
                raise RegistryError(f"no live gold label has request id(s) {missing}: nothing retracted")
            version = f"gold-v{gold_number(versions[-1]) + 1}"
            at = datetime.now(timezone.utc).isoformat()
            gone = [
                {
                    "request_id": r,
                    "key": feedback_key(live[r]),
                    "row_id": live[r]["row_id"],
                    "label": live[r]["label"],
                    "gold_version": live[r]["gold_version"],
                    "source": live[r].get("source"),
                    "labeled_by": live[r].get("who"),
                    "who": who,
                    "at": at,
                    "reason": reason,
                }
                for r in wanted
            ]
            info = {
                "version": version,
                "parent": versions[-1],
                "created_at": at,
                "until_ts": None,
                "accepted": 0,
                "refused": 0,
                "conflicts": [],
                "refused_by_reason": {},
                "retracted": len(gone),
            }
            base = self.root / "gold"
            atomic_write_text(base / "labels" / f"{version}.jsonl", "")
            atomic_write_text(base / "refused" / f"{version}.jsonl", "")
            atomic_write_text(base / "retracted" / f"{version}.jsonl", _jsonl(gone))
            atomic_write_json(base / "versions" / f"{version}.json", info)
            self._audit("gold_retract", who=who, gold_version=version, retracted=wanted, reason=reason)
            commit = self._commit(f"{version}: {len(gone)} gold label(s) retracted ({reason})", tag=version)
            log(f"registry: {version} tagged at {commit[:10]}: {len(gone)} gold label(s) retracted by {who}")
            return {"gold_version": version, "commit": commit, "retracted": gone}

    @staticmethod
    def _refusal(cand: dict[str, Any], classes: list[int], tests: set[str], seen: set[str]) -> str | None:
        if feedback_key(cand) in seen:
            return "duplicate"
        if cand.get("row_id") is None or str(cand["row_id"]) == "":
            return "no row id: the served row does not name its row"
        label = cand.get("label")
        if isinstance(label, bool) or not isinstance(label, int) or label not in classes:
            return f"label {label!r} is outside the classes {classes}"
        if str(cand["row_id"]) in tests:
            return TEST_REFUSAL
        return None


def _brief(cand: dict[str, Any]) -> dict[str, Any]:
    """A refused candidate as recorded: everything but the raw row (its id is kept)."""
    return {k: v for k, v in cand.items() if k != "raw"}


def _jsonl(items: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(i, sort_keys=True, default=str) + "\n" for i in items)


def _count(reasons: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in reasons:
        key = r if r == TEST_REFUSAL else r.split(":")[0]
        out[key] = out.get(key, 0) + 1
    return out
