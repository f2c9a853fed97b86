"""The test folders a change touches: `make test-changed` runs them (not the extended tier).

    python -m ops.test_changed [--base REV]   # prints the folders, one a line (default base: HEAD, plus
                                              # the files git does not track yet)

A file maps to the tests of its package: tasks/<package>/... -> tests/<package>, a step
(tasks/<step>.py) -> tests/steps, ops/ -> tests/ops, dags/ -> tests/dags, plugins/ -> tests/e2e (the
Sluice page), bench/ -> tests/bench, docs/ and README.md -> tests/docs, tests/<folder>/... -> itself;
a change to the core, the params, the lock or the shared test helpers (tests/conftest.py,
tests/helpers/) touches everything (tests). Standard library only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVERYTHING = ("tasks/core/", "params.yaml", "pyproject.toml", "constraints.txt", "tests/conftest.py", "tests/helpers/")


def folders_for(paths: list[str], exists=lambda p: (ROOT / p).is_dir()) -> list[str]:
    """The test folders for changed `paths` (repo-relative). Pure but for `exists`."""
    out: set[str] = set()
    for p in paths:
        parts = p.split("/")
        if p.startswith(EVERYTHING):
            return ["tests"]
        if parts[0] == "tasks" and len(parts) > 2:
            out.add(f"tests/{parts[1]}")
        elif parts[0] == "tasks" and p.endswith(".py"):
            out.add("tests/steps")
        elif parts[0] in ("ops", "dags", "bench", "docs") or p == "README.md":
            out.add({"README.md": "tests/docs"}.get(p, f"tests/{parts[0]}"))
        elif parts[0] == "plugins":
            out.add("tests/e2e")
        elif parts[0] == "tests" and len(parts) > 2:
            out.add(f"tests/{parts[1]}")
    return sorted(f for f in out if exists(f))


def changed(base: str) -> list[str]:
    def git(*args: str) -> list[str]:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()

    return sorted(set(git("diff", "--name-only", base)) | set(git("ls-files", "--others", "--exclude-standard")))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ops.test_changed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--base", default="HEAD", help="the revision the change is against (default HEAD)")
    args = ap.parse_args(argv)
    print("\n".join(folders_for(changed(args.base))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
