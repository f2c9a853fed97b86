"""Data contracts: Great Expectations suites (a dataset plug-in's raw.json and labeled.json), run as gates.

A suite file is JSON: {"name", "description", "expectations": [{"type", "kwargs",
"meta": {"guards": "<the failure this expectation stops>"}}]}. Its content hash is
recorded with every data version, so each version names the contract it passed.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.core.files import json_safe


class ContractError(ValueError):
    """The suite file itself is broken (not the data)."""


@dataclass
class Failure:
    """One failed expectation. `observed` is GX's observed value; for a per-row check (no observed value)
    it is the share of offending rows in percent (`observed_percent`). `difference`: a schema check's
    difference in words (schema.py). `share`: the observed statistic and its bounds are fractions of rows
    (the mean of a 0/1 column), shown in percent. `column_missing`: the column is not in the data at all."""

    expectation: str
    column: str | None
    guards: str
    observed: Any
    expected: dict[str, Any]
    unexpected_count: int | None = None
    sample_values: list[Any] = field(default_factory=list)
    sample_rows: list[int] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    difference: str | None = None
    observed_percent: bool = False
    share: bool = False
    column_missing: bool = False
    total_rows: int | None = None

    def describe(self) -> str:
        """One line: what failed, observed against expected, every percentage with its % sign."""
        where = f" on column {self.column!r}" if self.column else ""
        if self.column_missing:
            return f"{self.expectation}{where}: the column is not in the data: not checked (guards: {self.guards})"
        if self.difference:
            return f"{self.expectation}: {self.difference} (guards: {self.guards})"
        if self.expectation.startswith("file_"):
            return f"{self.expectation}: {self.observed} (guards: {self.guards})"
        msg = f"{self.expectation}{where}: "
        if self.unexpected_count:
            of = f" of {self.total_rows}" if self.total_rows else ""
            shown = self.observed_percent and self.observed is not None
            share = f" ({percent(self.observed, 'percent')})" if shown else ""
            msg += (
                f"{self.unexpected_count}{of} rows offend{share}, e.g. values {self.sample_values[:5]}"
                f" at rows {self.sample_rows[:5]}"
            )
        elif self.observed_percent:
            msg += f"observed {percent(self.observed, 'percent')} of rows offending"
        else:
            msg += f"observed {percent(self.observed) if self.share else repr(self.observed)}"
        expected = _expected_in_words(self.expected, self.share)
        if expected:
            msg += f"; expected {expected}"
        if self.error:
            msg += f"; error: {self.error}"
        return f"{msg} (guards: {self.guards})"


def percent(value: Any, given_as: str = "fraction") -> str:
    """`value` as a percentage with its unit: 0.125 (a fraction) or 12.5 (given_as="percent") -> '12.5%'."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return repr(value)
    pct = value * 100 if given_as == "fraction" else value
    return f"{pct:.4g}%"


def _expected_in_words(expected: dict[str, Any], share: bool) -> str:
    """The expectation's arguments, bounds and `mostly` (a fraction of rows) in percent where they are shares."""
    shown = dict(expected)
    parts = []
    if share and ("min_value" in shown or "max_value" in shown):
        lo, hi = shown.pop("min_value", None), shown.pop("max_value", None)
        parts.append(f"between {percent(lo) if lo is not None else '-'} and {percent(hi) if hi is not None else '-'}")
    if "mostly" in shown:
        parts.append(f"mostly (at least {percent(shown.pop('mostly'))} of rows)")
    if shown:
        parts.append(str(shown))
    return ", ".join(parts)


@dataclass
class ContractResult:
    suite: str
    suite_hash: str
    success: bool
    evaluated: int
    failures: list[Failure] = field(default_factory=list)
    rows: int = 0
    skipped: list[str] = field(default_factory=list)  # checks against a previous version, when there is none

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        skipped = f" ({len(self.skipped)} skipped: no previous version to compare with)" if self.skipped else ""
        if self.success:
            return f"contract {self.suite} passed: {self.evaluated} expectations on {self.rows} rows{skipped}"
        lines = [f"contract {self.suite} FAILED: {len(self.failures)} of {self.evaluated} expectations"]
        lines += [f"  - {f.describe()}" for f in self.failures if not f.column_missing]
        # Checks on a column that is not there: one line per column, not one per expectation.
        missing: dict[str, list[str]] = {}
        for f in self.failures:
            if f.column_missing:
                missing.setdefault(f.column or "", []).append(f.expectation)
        lines += [
            f"  - column {column!r} is not in the data, so {len(names)} expectation(s) on it were not checked: "
            + ", ".join(names)
            for column, names in missing.items()
        ]
        return "\n".join(lines)

    def first_cause(self) -> str:
        """The failure a person reads first (the file, then the schema, then the columns), one line."""
        return self.failures[0].describe() if self.failures else self.summary()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ContractResult":
        """A saved report (to_dict) read back; fields a newer version added take their defaults."""
        known = set(Failure.__dataclass_fields__)
        failures = [Failure(**{k: v for k, v in f.items() if k in known}) for f in d.get("failures", [])]
        fields = set(cls.__dataclass_fields__) - {"failures"}
        return cls(**{k: v for k, v in d.items() if k in fields}, failures=failures)


def suite_path(name: str) -> Path:
    """A contract is the path of its .json file (a dataset plug-in's RAW_CONTRACT, LABELED_CONTRACT)."""
    if not str(name).endswith(".json"):
        raise ContractError(f"a contract is the path of a .json suite (a plug-in folder's raw.json), got {name!r}")
    return Path(name)


def load_suite_spec(name: str) -> dict[str, Any]:
    path = suite_path(name)
    try:
        spec = json.loads(path.read_text())
    except FileNotFoundError:
        raise ContractError(f"no contract named {name!r} ({path} missing)") from None
    except json.JSONDecodeError as exc:
        raise ContractError(f"contract {path} is not valid JSON: {exc}") from None
    exps = spec.get("expectations")
    if not isinstance(exps, list) or not exps:
        raise ContractError(f"contract {path} has no expectations")
    seen = set()
    for i, e in enumerate(exps):
        if not e.get("meta", {}).get("guards"):
            raise ContractError(f"contract {path}: expectation #{i} ({e.get('type')}) has no meta.guards note")
        key = _key(e.get("type", ""), e.get("kwargs", {}))
        if key in seen:
            raise ContractError(f"contract {path}: expectation #{i} repeats {key}")
        seen.add(key)
    return spec


def suite_hash(name: str) -> str:
    spec = load_suite_spec(name)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def _gx_batch_definition():
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    return (
        ctx.data_sources.add_pandas("sluice").add_dataframe_asset("frame").add_batch_definition_whole_dataframe("all")
    )


def resolve_relative(expectation: dict[str, Any], reference: pd.DataFrame) -> dict[str, Any]:
    """Fill an expectation's bounds from the previous version's data (meta.relative_to_previous). Pure.

    {"categorical_kl": threshold}: the column's value distribution may diverge from the
    reference's by at most `threshold` (KL; add-one smoothing over the values either has).
    {"max_rel_change": r} / {"max_abs_change": a}: the statistic the expectation checks (mean or
    median) must stay within r (relative) or a (absolute) of the reference's.
    """
    rule = expectation["meta"]["relative_to_previous"]
    column = expectation["kwargs"]["column"]
    kwargs = dict(expectation["kwargs"])
    ref = reference[column].dropna()
    if "categorical_kl" in rule:
        counts = ref.value_counts()
        values = sorted(set(counts.index) | set(rule.get("values", [])), key=str)
        weights = [(counts.get(v, 0) + 1) / (len(ref) + len(values)) for v in values]
        kwargs.update(
            partition_object={"values": [json_safe(v) for v in values], "weights": weights},
            threshold=rule["categorical_kl"],
        )
    else:
        stat = {"expect_column_mean_to_be_between": ref.mean, "expect_column_median_to_be_between": ref.median}[
            expectation["type"]
        ]()
        half = rule["max_rel_change"] * abs(stat) if "max_rel_change" in rule else rule["max_abs_change"]
        kwargs.update(min_value=float(stat - half), max_value=float(stat + half))
    return {**expectation, "kwargs": kwargs}


def validate_frame(df: pd.DataFrame, name: str, reference: pd.DataFrame | None = None) -> ContractResult:
    """Run suite `name` on `df`. Never raises for bad data: failures come back named.

    `reference`: the previous version's data, for expectations relative to it; without it
    they are skipped (and listed as skipped)."""
    import great_expectations as gx

    spec = load_suite_spec(name)
    expectations, skipped = [], []
    for e in spec["expectations"]:
        if "relative_to_previous" in e["meta"]:
            if reference is None:
                skipped.append(_key(e["type"], e["kwargs"]))
                continue
            e = resolve_relative(e, reference)
        expectations.append(e)
    spec = {**spec, "expectations": expectations}
    suite = gx.ExpectationSuite(name=spec["name"], expectations=spec["expectations"])
    if len(suite.expectations) != len(spec["expectations"]):
        # GX drops unknown expectation types with only a log line: the suite would pass on nothing.
        known = {e.expectation_type for e in suite.expectations}
        missing = [e["type"] for e in spec["expectations"] if e["type"] not in known]
        raise ContractError(f"contract {name}: GX did not load expectation(s) {missing}")
    guards = {_key(e["type"], e["kwargs"]): e["meta"]["guards"] for e in spec["expectations"]}

    batch = _gx_batch_definition().get_batch(batch_parameters={"dataframe": df})
    result = batch.validate(suite, result_format="SUMMARY")
    failures = []
    for r in result.results:
        if r.success:
            continue
        cfg = r.expectation_config
        kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
        res = r.result or {}
        exc = r.exception_info or {}
        column = kwargs.get("column")
        failures.append(
            Failure(
                expectation=cfg.type,
                column=column,
                guards=guards.get(_key(cfg.type, kwargs), ""),
                observed=json_safe(res.get("observed_value", res.get("unexpected_percent"))),
                expected={k: v for k, v in kwargs.items() if k != "column"},
                unexpected_count=res.get("unexpected_count"),
                sample_values=json_safe(res.get("partial_unexpected_list", []))[:10],
                sample_rows=json_safe(res.get("partial_unexpected_index_list", []))[:10],
                rows=_sample_rows(df, res.get("partial_unexpected_index_list", [])),
                error=exc.get("exception_message") if exc.get("raised_exception") else None,
                difference=schema_failure_difference(cfg.type, kwargs, res.get("observed_value"), df, reference),
                observed_percent="observed_value" not in res and res.get("unexpected_percent") is not None,
                share=cfg.type in _SHARE_STATISTICS and column in df.columns and is_zero_one(df[column]),
                column_missing=column is not None and column not in df.columns,
                total_rows=res.get("element_count") or len(df),
            )
        )
    failures.sort(key=lambda f: (f.column or "", f.expectation))  # GX returns results unordered
    return ContractResult(
        suite=spec["name"],
        suite_hash=suite_hash(name),
        success=not failures,
        evaluated=len(result.results),
        failures=failures,
        rows=len(df),
        skipped=skipped,
    )


# Expectations on a column's statistic: when the column holds only 0 and 1, the statistic is a share of rows.
_SHARE_STATISTICS = {"expect_column_mean_to_be_between"}


def is_zero_one(column: pd.Series) -> bool:
    """Whether every non-null value is 0 or 1 (so its mean is a share of rows)."""
    values = column.dropna()
    return len(values) > 0 and bool(values.isin([0, 1]).all())


def schema_failure_difference(
    etype: str, kwargs: dict[str, Any], observed: Any, df: pd.DataFrame, reference: pd.DataFrame | None
) -> str | None:
    """For a failed schema expectation, the difference in words (schema.py); None for any other."""
    from tasks.contracts.schema import column_order_difference, describe_difference, schema_difference

    actual = [str(c) for c in df.columns]
    if etype == "expect_table_columns_to_match_set":
        diff = schema_difference(actual, kwargs.get("column_set") or [], df, reference)
        if not kwargs.get("exact_match", True):
            diff["unexpected"] = []  # extra columns are allowed
        return describe_difference(diff) or None
    if etype == "expect_table_columns_to_match_ordered_list":
        expected = kwargs.get("column_list") or []
        return describe_difference(schema_difference(actual, expected, df, reference)) or column_order_difference(
            actual, expected
        )
    return None


def _sample_rows(df: pd.DataFrame, index: list, n: int = 5) -> list[dict[str, Any]]:
    """The first offending rows, whole, so a person sees the record and not only the value."""
    idx = [i for i in index[:n] if i in df.index]
    return json_safe(df.loc[idx].to_dict("records")) if idx else []


def _key(etype: str, kwargs: dict[str, Any]) -> str:
    """An expectation's identity in a suite: its type and column (one of each per suite)."""
    return f"{etype}:{kwargs.get('column', '')}"


def write_gate_report(run_dir: Path, result: ContractResult) -> dict[str, Any]:
    """Save the readable and the JSON report; return the small dict XCom and the summary carry."""
    from tasks.core.files import atomic_write_bytes, atomic_write_json

    folder = run_dir / "contracts"
    atomic_write_json(folder / f"{result.suite}.json", result.to_dict())
    atomic_write_bytes(folder / f"{result.suite}.txt", (result.summary() + "\n").encode())
    return {
        "passed": result.success,
        "suite": result.suite,
        "suite_hash": result.suite_hash,
        "evaluated": result.evaluated,
        "failed": len(result.failures),
        "rows": result.rows,
        "summary": result.summary(),
        "report": str(folder / f"{result.suite}.txt"),
        "report_json": str(folder / f"{result.suite}.json"),
    }
