"""GTO tags mirroring the registry, so `gto show` and DVC Studio see its model versions and stages.

The registry's own commits, `model-vN` tags and `registry.json` stay the source of truth; these
tags follow them, in GTO's format (gto 1.10, `gto/tag.py` and `gto/constants.py`):

    model@v2.0.0        registration of model-v2, on model-v2's commit
    model#prod#5        stage prod assigned to the version registered on that commit
    model#prod!#6       stage prod unassigned from it (the stage moved on: promote, rollback)
    model#canary#7      the serving challenger (canary), likewise

GTO reads only annotated tags (it drops lightweight ones) and finds a stage's version by the
commit the stage tag points at, so a stage tag points at the version's registration commit, not
at the commit that moved the pointer. The `#N` counter is GTO's: one more than the highest on any
of the artifact's tags. GTO orders events by the tagger time (whole seconds), so each new tag is
dated at least one second after the newest one: a stage moved away and back within a second
still reads in the right order.

`sync` is idempotent: it compares the tags with the registry's state and adds only what is
missing, so a transaction killed between its commit and its tags is caught up by the next one.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable

from tasks.core.versions import is_model_version, version_number

ARTIFACT = "model"
# GTO stage -> how to read its one version from a registry state (registry.json).
STAGES: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "prod": lambda state: state.get("prod_model"),
    "canary": lambda state: ((state.get("serving") or {}).get("challenger") or {}).get("model_version"),
}
_STAGE_TAG = re.compile(rf"^{ARTIFACT}#(?P<stage>[a-z]+)(?P<cancel>!?)#(?P<counter>[0-9]+)$")
_COUNTER = re.compile(r"#(?P<counter>[0-9]+)$")


def gto_version(model_version: str) -> str:
    """model-v3 -> v3.0.0 (GTO versions are SemVer)."""
    return f"v{version_number(model_version)}.0.0"


def registration_tag(model_version: str) -> str:
    return f"{ARTIFACT}@{gto_version(model_version)}"


@dataclass(frozen=True)
class ExistingTag:
    name: str
    commit: str  # the commit it points at (peeled)
    time: int  # tagger time, seconds since the epoch (0: a lightweight tag)


@dataclass(frozen=True)
class NewTag:
    name: str
    commit: str
    message: str


def active_stages(tags: list[ExistingTag], version_of: dict[str, str]) -> dict[str, set[str]]:
    """Stage -> the model versions it is assigned to now: per (stage, version) the last stage tag
    (by GTO's counter) decides. Pure."""
    last: dict[tuple[str, str], tuple[int, bool]] = {}
    for t in tags:
        m = _STAGE_TAG.match(t.name)
        if not m or t.commit not in version_of:
            continue
        key, event = (m["stage"], version_of[t.commit]), (int(m["counter"]), not m["cancel"])
        last[key] = max(last.get(key, event), event)
    out: dict[str, set[str]] = {}
    for (stage, version), (_, assigned) in last.items():
        if assigned:
            out.setdefault(stage, set()).add(version)
    return out


def plan(state: dict[str, Any], commits: dict[str, str], tags: list[ExistingTag]) -> list[NewTag]:
    """The tags to add so that GTO reads what `state` says. Pure.

    commits: model version -> its registration commit; tags: the artifact's existing tags."""
    names = {t.name for t in tags}
    new: list[NewTag] = []
    for version in sorted(commits, key=version_number):
        if registration_tag(version) not in names:
            gv = gto_version(version)
            new.append(
                NewTag(
                    registration_tag(version),
                    commits[version],
                    f"Registering artifact {ARTIFACT} version {gv} (registry {version})",
                )
            )
    counter = max((int(m["counter"]) for t in tags if (m := _COUNTER.search(t.name))), default=0)
    active = active_stages(tags, {c: v for v, c in commits.items()})
    for stage, read in STAGES.items():
        wanted = {v for v in [read(state)] if v in commits}
        for version in sorted(active.get(stage, set()) - wanted, key=version_number):
            counter += 1
            message = f"Unassigning stage '{stage}' to artifact '{ARTIFACT}' version '{gto_version(version)}'"
            new.append(NewTag(f"{ARTIFACT}#{stage}!#{counter}", commits[version], message))
        for version in sorted(wanted - active.get(stage, set()), key=version_number):
            counter += 1
            message = f"Assigning stage {stage} to artifact {ARTIFACT} version {gto_version(version)}"
            new.append(NewTag(f"{ARTIFACT}#{stage}#{counter}", commits[version], message))
    return new


def _git(root, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def read_tags(root) -> tuple[dict[str, str], list[ExistingTag]]:
    """(model version -> its commit, the GTO artifact's tags) from the repository at `root`, in one git call."""
    out = _git(
        root,
        "for-each-ref",
        "--format=%(refname:strip=2)%09%(objectname)%09%(*objectname)%09%(taggerdate:unix)",
        "refs/tags/",
    )
    commits, tags = {}, []
    for line in out.splitlines():
        name, obj, peeled, when = (line.split("\t") + ["", "", ""])[:4]
        commit = peeled or obj
        if is_model_version(name):
            commits[name] = commit
        elif name.startswith((f"{ARTIFACT}@", f"{ARTIFACT}#")):
            tags.append(ExistingTag(name, commit, int(when) if when.strip() else 0))
    return commits, tags


def sync(root, state: dict[str, Any], clock: Callable[[], float] = time.time) -> list[str]:
    """Add the GTO tags `state` calls for to the repository at `root` (annotated, each dated after the
    newest existing one); returns the names added. Idempotent."""
    commits, tags = read_tags(root)
    new = plan(state, commits, tags)
    when = max([int(clock())] + [t.time + 1 for t in tags])
    for tag in new:
        env = {**os.environ, "GIT_COMMITTER_DATE": f"{when} +0000"}
        _git(root, "tag", "-a", tag.name, "-m", tag.message, tag.commit, env=env)
        when += "#" in tag.name  # stage events in order, a second apart; registrations need no order
    return [t.name for t in new]
