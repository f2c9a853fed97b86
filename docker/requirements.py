"""Print the direct requirements of the base and one extra of pyproject.toml, one a line, the
project's own extras (`sluice[serve]`) expanded: what an image installs before its code is copied,
so that a change of code rebuilds only the layers after it.

    python requirements.py serve > /tmp/requirements.txt   # beside pyproject.toml, in an image build

The versions come from the lock (`pip install -c constraints.txt -r ...`). Standard library only:
it runs on the base image's Python before anything is installed."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path


def requirements(pyproject: dict, extra: str) -> list[str]:
    project = pyproject["project"]
    extras = project["optional-dependencies"]
    if extra not in extras:
        raise SystemExit(f"pyproject.toml has no extra {extra!r} (it has: {', '.join(sorted(extras))})")
    own = re.compile(rf"^{re.escape(project['name'])}\[([^\]]+)\]$")
    out, todo, seen = list(project["dependencies"]), [extra], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in extras[name]:
            m = own.match(req)
            if m:
                todo += [e.strip() for e in m.group(1).split(",")]
            elif req not in out:
                out.append(req)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python requirements.py EXTRA")
    path = Path(__file__).with_name("pyproject.toml")
    if not path.exists():  # run from the repository (docker/requirements.py)
        path = Path(__file__).resolve().parents[1] / "pyproject.toml"
    print("\n".join(requirements(tomllib.loads(path.read_text()), sys.argv[1])))
