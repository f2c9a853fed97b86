"""rollback: put the data and the model back, together, as one recorded operation.

    python -m tasks.rollback --data-version data-v3 --model-version model-v2 --reason "bad labels in batch 7"

Restores the current-data pointer (what the next snapshot builds on), the prod
model and the serving pointer in one registry commit, appended to audit.jsonl
(who, when, from, to, reason). Versions are never deleted; a second identical
rollback changes nothing. The `rollback` DAG and the nightly DAG's model-rejection
branches call this module.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tasks.registry import Registry, RegistryError
from tasks.core.settings import Settings


def rollback(settings: Settings, data_version: str | None, model_version: str | None, reason: str,
             who: str | None = None) -> dict[str, Any]:
    return Registry(settings).rollback(data_version, model_version, reason, who=who)


def rollback_to_prod_lineage(settings: Settings, reason: str, who: str | None = None) -> dict[str, Any]:
    """After a rejected challenger: prod stays, and the data pointer returns to the version
    prod was trained on, so data and model move back together."""
    registry = Registry(settings)
    prod = registry.state()["prod_model"]
    if prod is None:
        return {"changed": False, "reason": "no prod model yet: nothing to roll back to"}
    data_version = registry.model_version_info(prod)["data_version"]
    return registry.rollback(data_version, prod, reason, who=who)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Either version may be left out; that pointer then stays.")
    parser.add_argument("--data-version", help="e.g. data-v3")
    parser.add_argument("--model-version", help="e.g. model-v2")
    parser.add_argument("--reason", required=True, help="why (recorded in the audit log)")
    args = parser.parse_args(argv)
    try:
        result = rollback(Settings.from_env(), args.data_version, args.model_version, args.reason)
    except RegistryError as exc:
        print(f"rollback refused: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
