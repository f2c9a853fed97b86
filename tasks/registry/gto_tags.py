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

What goes through gto's library and what does not: the tag names (`gto.tag.name_tag`), their parsing
(`gto.tag.parse_name`: artifact, action, stage, counter) are GTO's; the messages are worded as
gto's own (`gto/registry.py`), with the registry version added to a registration's. The tags are
written by `git tag -a` here, not by `gto.api.register/assign` nor `gto.tag.create_tag`, because
neither can date a tag: create_tag goes through scmrepo, whose default backend (dulwich's
`tag_create`) stamps `time.time()` and is given no `tag_time`, so two stage moves within one second
(a promote, then a rollback) would tie and GTO could read them in the wrong order. (scmrepo's
gitpython backend would honour GIT_COMMITTER_DATE, but only from os.environ, which is process-wide
and would also date any other thread's git commits.) The api functions would also read the whole
GTO registry state per tag and count the `#N` counter again from the repository for each one, where
`plan` numbers a batch of new tags at once, purely. gto is imported when a tag is named or read,
not with this module (its import takes about 0.2 s, which the registry's readers need not pay).
"""

from __future__ import annotations

import os
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


def gto_version(model_version: str) -> str:
    """model-v3 -> v3.0.0 (GTO versions are SemVer)."""
    return f"v{version_number(model_version)}.0.0"


def registration_tag(model_version: str) -> str:
    """model-v3 -> model@v3.0.0 (GTO's registration, no counter)."""
    from gto.constants import Action
    from gto.tag import name_tag

    return name_tag(Action.REGISTER, ARTIFACT, version=gto_version(model_version), simple=True)


def stage_tag(stage: str, counter: int, assign: bool = True) -> str:
    """GTO's stage event: model#prod#5 (assigned), model#prod!#6 (unassigned)."""
    from gto.constants import Action
    from gto.tag import COUNT_DELIMITER, name_tag

    action = Action.ASSIGN if assign else Action.UNASSIGN
    return f"{name_tag(action, ARTIFACT, stage=stage, simple=True)}{COUNT_DELIMITER}{counter}"


def parsed(name: str) -> dict[str, Any]:
    """GTO's reading of a tag name when it is one of the artifact's tags, else {}: its action (gto's
    Action), and its stage, version and counter where it has them (keys: gto.constants' names)."""
    from gto.constants import NAME
    from gto.tag import parse_name

    out = parse_name(name, raise_on_fail=False)
    return out if out.get(NAME) == ARTIFACT else {}


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
    from gto.constants import ACTION, COUNTER, STAGE, Action

    last: dict[tuple[str, str], tuple[int, bool]] = {}
    for t in tags:
        m = parsed(t.name)
        if m.get(ACTION) not in (Action.ASSIGN, Action.UNASSIGN) or COUNTER not in m or t.commit not in version_of:
            continue
        key, event = (m[STAGE], version_of[t.commit]), (m[COUNTER], m[ACTION] is Action.ASSIGN)
        last[key] = max(last.get(key, event), event)
    out: dict[str, set[str]] = {}
    for (stage, version), (_, assigned) in last.items():
        if assigned:
            out.setdefault(stage, set()).add(version)
    return out


def plan(state: dict[str, Any], commits: dict[str, str], tags: list[ExistingTag]) -> list[NewTag]:
    """The tags to add so that GTO reads what `state` says. Pure.

    commits: model version -> its registration commit; tags: the artifact's existing tags."""
    from gto.constants import COUNTER

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
    counter = max((m[COUNTER] for t in tags if COUNTER in (m := parsed(t.name))), default=0)  # GTO's rule
    active = active_stages(tags, {c: v for v, c in commits.items()})
    for stage, read in STAGES.items():
        wanted = {v for v in [read(state)] if v in commits}
        for version in sorted(active.get(stage, set()) - wanted, key=version_number):
            counter += 1
            message = f"Unassigning stage '{stage}' to artifact '{ARTIFACT}' version '{gto_version(version)}'"
            new.append(NewTag(stage_tag(stage, counter, assign=False), commits[version], message))
        for version in sorted(wanted - active.get(stage, set()), key=version_number):
            counter += 1
            message = f"Assigning stage {stage} to artifact {ARTIFACT} version {gto_version(version)}"
            new.append(NewTag(stage_tag(stage, counter), commits[version], message))
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
        elif parsed(name):
            tags.append(ExistingTag(name, commit, int(when) if when.strip() else 0))
    return commits, tags


def sync(root, state: dict[str, Any], clock: Callable[[], float] = time.time) -> list[str]:
    """Add the GTO tags `state` calls for to the repository at `root` (annotated, each dated after the
    newest existing one); returns the names added. Idempotent."""
    from gto.constants import COUNTER

    commits, tags = read_tags(root)
    new = plan(state, commits, tags)
    when = max([int(clock())] + [t.time + 1 for t in tags])
    for tag in new:
        env = {**os.environ, "GIT_COMMITTER_DATE": f"{when} +0000"}
        _git(root, "tag", "-a", tag.name, "-m", tag.message, tag.commit, env=env)
        when += COUNTER in parsed(tag.name)  # stage events in order, a second apart; registrations need none
    return [t.name for t in new]
