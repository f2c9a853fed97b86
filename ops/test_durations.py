"""Every test's duration, kept: per-folder sums, the slowest tests, and the figures docs/testing.md shows.

    python -m ops.test_durations summarize .test-results/junit.xml   # print a junit XML's sums
    python -m ops.test_durations keep .test-results/durations.json   # copy a run's figures to docs/test-durations.json
    python -m ops.test_durations docs [--check]                      # docs/testing.md's table from that file

Every pytest run writes `.test-results/durations.json` (git-ignored) and prints its per-folder sums and
the 30 slowest tests before its closing line (tests/conftest.py's terminal summary, from pytest's own
reports: setup, call and teardown of each test); `make test` writes the junit XML beside it. A
clean-clone run's figures are kept in the committed `docs/test-durations.json` (with the commit they were
measured at), and the page's table is generated from it: never typed. Standard library only (`make lint`
runs the check).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from tasks.core.files import atomic_write_json, stale_page

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / ".test-results"
KEPT = ROOT / "docs" / "test-durations.json"
PAGE = ROOT / "docs" / "testing.md"
BEGIN, END = "<!-- durations: begin (python -m ops.test_durations docs) -->", "<!-- durations: end -->"
SLOWEST = 30


def read_junit(path: Path) -> list[dict[str, Any]]:
    """Each test case: its id (file::name), its folder under tests/, seconds, outcome."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        parts = classname.split(".")
        module = next((i for i in range(len(parts), 0, -1) if parts[i - 1].startswith("test_")), len(parts))
        file = "/".join(parts[:module]) + ".py"
        outcome = "passed"
        for child, what in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            if case.find(child) is not None:
                outcome = what
        cases.append(
            {
                "id": f"{file}::{'.'.join(parts[module:] + [name])}",
                "folder": folder_of(file),
                "seconds": float(case.get("time") or 0.0),
                "outcome": outcome,
            }
        )
    return cases


def summarize(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Per folder: tests and seconds (largest first); the SLOWEST tests; the totals. Pure."""
    folders: dict[str, dict[str, Any]] = defaultdict(lambda: {"tests": 0, "seconds": 0.0, "failed": 0})
    for c in cases:
        f = folders[c["folder"]]
        f["tests"] += 1
        f["seconds"] += c["seconds"]
        f["failed"] += c["outcome"] in ("failed", "error")
    ordered = sorted(folders.items(), key=lambda kv: -kv[1]["seconds"])
    return {
        "tests": len(cases),
        "seconds": round(sum(c["seconds"] for c in cases), 1),
        "failed": sum(c["outcome"] in ("failed", "error") for c in cases),
        "skipped": sum(c["outcome"] == "skipped" for c in cases),
        "folders": {name: {**f, "seconds": round(f["seconds"], 1)} for name, f in ordered},
        "slowest": [
            {"id": c["id"], "seconds": round(c["seconds"], 1)}
            for c in sorted(cases, key=lambda c: -c["seconds"])[:SLOWEST]
        ],
    }


def merge(parts: dict[str, dict[str, Any]], walls: dict[str, float]) -> dict[str, Any]:
    """Summaries of one run's parts (ops/test_run.py) as one: tests, seconds and folders added, the
    slowest of all, and each part's tests, seconds and wall time under "parts". Pure."""
    folders: dict[str, dict[str, Any]] = defaultdict(lambda: {"tests": 0, "seconds": 0.0, "failed": 0})
    for s in parts.values():
        for name, f in s["folders"].items():
            for key in ("tests", "seconds", "failed"):
                folders[name][key] += f[key]
    ordered = sorted(folders.items(), key=lambda kv: -kv[1]["seconds"])
    slowest = sorted((t for s in parts.values() for t in s["slowest"]), key=lambda t: -t["seconds"])[:SLOWEST]
    return {
        **{key: sum(s[key] for s in parts.values()) for key in ("tests", "failed", "skipped")},
        "seconds": round(sum(s["seconds"] for s in parts.values()), 1),
        "folders": {name: {**f, "seconds": round(f["seconds"], 1)} for name, f in ordered},
        "slowest": slowest,
        "parts": {
            name: {"tests": s["tests"], "seconds": s["seconds"], "wall_s": walls.get(name)} for name, s in parts.items()
        },
    }


def folder_of(nodeid: str) -> str:
    """A test's folder: tests/<package> (tests itself for a module at the top)."""
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def lines(s: dict[str, Any]) -> list[str]:
    out = [f"{s['tests']} tests, {s['seconds']:,.0f} s of tests ({s['failed']} failed, {s['skipped']} skipped)"]
    out += ["", f"{'folder':<24} {'tests':>6} {'seconds':>9}"]
    folders = sorted(s["folders"].items(), key=lambda kv: -kv[1]["seconds"])
    out += [f"{name:<24} {f['tests']:>6} {f['seconds']:>9,.1f}" for name, f in folders]
    out += ["", f"the {len(s['slowest'])} slowest:"]
    out += [f"{t['seconds']:>8,.1f} s  {t['id']}" for t in s["slowest"]]
    for name, p in s.get("parts", {}).items():
        wall = "" if p["wall_s"] is None else f", {p['wall_s']:,.0f} s wall"
        out.append(f"part {name}: {p['tests']} tests, {p['seconds']:,.0f} s of tests{wall}")
    return out


def table(kept: dict[str, Any]) -> str:
    """docs/testing.md's figures from the kept file."""
    s = kept["summary"]
    summed = " (summed over each part's workers)" if s.get("parts") else ""
    head = [
        BEGIN,
        f"Measured by `{kept['command']}` on a clean clone at commit {kept['commit']} ({kept['machine']}): "
        f"{s['tests']} tests, {s['seconds']:,.0f} s of tests{summed}, {kept['wall_s']:,.0f} s in all "
        f"({s['failed']} failed, {s['skipped']} skipped).",
        *[
            f"Its {name} part: {p['tests']} tests, {p['seconds']:,.0f} s of tests in {p['wall_s']:,.0f} s of wall time."
            for name, p in s.get("parts", {}).items()
            if p.get("wall_s") is not None
        ],
        "",
        "| folder | tests | seconds |",
        "| --- | ---: | ---: |",
    ]
    folders = sorted(s["folders"].items(), key=lambda kv: -kv[1]["seconds"])
    rows = [f"| `{name}` | {f['tests']} | {f['seconds']:,.1f} |" for name, f in folders]
    slow = ["", f"The {min(10, len(s['slowest']))} slowest:", ""]
    slow += [f"- {t['seconds']:,.0f} s `{t['id']}`" for t in s["slowest"][:10]]
    return "\n".join(head + rows + slow + [END])


def page_with_table(page: str, kept: dict[str, Any]) -> str:
    if BEGIN not in page or END not in page:
        raise SystemExit(f"{PAGE} has no {BEGIN} ... {END} section")
    before, rest = page.split(BEGIN, 1)
    return before + table(kept) + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ops.test_durations", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summarize", help="print a junit XML's per-folder sums and slowest tests; write durations.json")
    s.add_argument("junit", type=Path)
    k = sub.add_parser("keep", help="keep a run's durations.json as docs/test-durations.json")
    k.add_argument("durations", type=Path)
    k.add_argument("--commit", required=True)
    k.add_argument("--wall-s", type=float, required=True, help="the whole run's seconds (set-up included)")
    k.add_argument("--run-command", default="CI=true bash .ci/run", help="what was run (the page names it)")
    k.add_argument("--machine", default="this 2-core machine")
    d = sub.add_parser("docs", help="write docs/testing.md's durations table from docs/test-durations.json")
    d.add_argument("--check", action="store_true", help="exit 1 naming the differences instead of writing")
    args = ap.parse_args(argv)
    if args.command == "summarize":
        if not args.junit.exists():
            print(f"no test durations: {args.junit} was not written (pytest did not run)", file=sys.stderr)
            return 0
        summary = summarize(read_junit(args.junit))
        atomic_write_json(args.junit.with_name("durations.json"), summary)
        print("\n".join(["", "test durations (" + str(args.junit) + "):", *lines(summary)]))
        return 0
    if args.command == "keep":
        summary = json.loads(args.durations.read_text())
        kept = {"commit": args.commit, "wall_s": args.wall_s, "command": args.run_command, "machine": args.machine}
        atomic_write_json(KEPT, {**kept, "summary": summary})
        print(f"kept in {KEPT}")
        return 0
    want = page_with_table(PAGE.read_text(), json.loads(KEPT.read_text()))
    if args.check:
        stale = stale_page(PAGE, want, str(KEPT.relative_to(ROOT)), "python -m ops.test_durations docs")
        if stale:
            print("\n".join(stale), file=sys.stderr)
        return 1 if stale else 0
    PAGE.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
