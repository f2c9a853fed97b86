"""Steps declared once: a function, its upstream records and its options give both the
step's CLI (`python -m tasks.<step>`) and its Airflow task (tasks/runner sits above the
subsystems: it wraps every run in the monitoring hook).

    @step
    def evaluate(ctx: StepContext, train: TrainRecord) -> EvaluateRecord: ...

A parameter named after a step (see `tasks.core.records.RECORDS`) is that step's record,
read from XCom in Airflow and from runs/<run_id>/steps/<name>.json on the CLI (with a
default of None it is optional: a branch that did not run). Keyword-only parameters are
options (`--batch` on the CLI, keyword arguments in the DAG). The step writes its record
to runs/<run_id>/steps/<record name>.json and returns it; Airflow pushes it to XCom.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import typing
from datetime import datetime, timezone
from typing import Any, Callable

from tasks.core.context import StepContext, parse_overrides, record_path, record_refusal
from tasks.core.errors import RefusedError, StepError
from tasks.core.files import atomic_write_json, json_safe, read_json
from tasks.core.params import ParamsError
from tasks.core.records import RECORDS, GateRecord, Record
from tasks.core.settings import SettingsError


class Step:
    """A step function with what it reads, derived from its signature."""

    def __init__(
        self, fn: Callable[..., Record], record_as: str | None = None, option_help: dict[str, str] | None = None
    ):
        self.fn = fn
        self.name = fn.__name__
        self.record_name = record_as or self.name
        self.doc = inspect.getdoc(sys.modules[fn.__module__]) or fn.__doc__ or self.name
        hints = typing.get_type_hints(fn)
        sig = inspect.signature(fn)
        self.reads: dict[str, bool] = {}  # upstream record name -> required
        self.options: dict[str, inspect.Parameter] = {}
        for p in list(sig.parameters.values())[1:]:
            if p.kind is p.KEYWORD_ONLY:
                self.options[p.name] = p
            elif p.name in RECORDS:
                self.reads[p.name] = p.default is inspect.Parameter.empty
            else:
                raise TypeError(f"step {self.name}: parameter {p.name!r} is neither a step record nor keyword-only")
        self.record_type = hints["return"]
        self.option_types = {name: hints.get(name, str) for name in self.options}
        self.option_help = option_help or {}
        self.__doc__, self.__name__, self.__module__ = fn.__doc__, fn.__name__, fn.__module__

    def __call__(self, ctx: StepContext, **kwargs: Any) -> Record:
        """Run with records and options given by the caller; write and return the record."""
        rec = self.fn(ctx, **kwargs)
        if not isinstance(rec, self.record_type):
            raise TypeError(f"step {self.name} returned {type(rec).__name__}, not {self.record_type.__name__}")
        atomic_write_json(record_path(ctx.run_dir, self.record_name), json_safe(rec.model_dump(mode="json")))
        return rec

    def run(
        self, ctx: StepContext, load: Callable[[str], Any], *, task_id: str | None = None, **options: Any
    ) -> Record:
        """Run with upstream records fetched by `load(name)` (None: that step did not run); its usage,
        metrics and alerts go to the metrics store as task `task_id` (default: the record's name)."""
        upstream = {}
        for name, required in self.reads.items():
            raw = load(name)
            if raw is None:
                if required:
                    raise StepError(
                        f"step {self.name} needs the record of step {name!r}, which this run "
                        f"({ctx.run_id}) has not written: run {name} first"
                    )
                continue
            upstream[name] = RECORDS[name].model_validate(raw)
        from tasks.monitoring.watch import watch_step

        with watch_step(ctx, task_id or self.record_name) as watch:
            rec = self(ctx, **upstream, **options)
            watch.finished(rec)
        return rec

    def main(self, argv: list[str] | None = None) -> int:
        """`python -m tasks.<step> --run-id ID [--set section.key=value] [options]`."""
        parser = argparse.ArgumentParser(
            prog=f"python -m {self.fn.__module__}",
            description=self.doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        default_run = f"manual__{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S')}"
        parser.add_argument(
            "--run-id",
            default=default_run,
            help="pipeline run id (names runs/<run_id>/; default: a new manual__<time> run)",
        )
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="SECTION.KEY=VALUE",
            help="override a params.yaml value for this run (repeatable), e.g. train.epochs=5",
        )
        for name, p in self.options.items():
            hint = self.option_types[name]
            parser.add_argument(
                f"--{name.replace('_', '-')}",
                dest=name,
                default=p.default,
                type=int if int in (typing.get_args(hint) or (hint,)) else str,
                help=self.option_help.get(name) or f"default: {p.default}",
            )
        args = parser.parse_args(argv)
        try:
            ctx = StepContext.create(args.run_id, overrides=parse_overrides(args.set))
            load = lambda name: (read_json(path) if (path := record_path(ctx.run_dir, name)).exists() else None)  # noqa: E731
            rec = self.run(ctx, load, **{name: getattr(args, name) for name in self.options})
        except (ParamsError, SettingsError, StepError, RefusedError, FileNotFoundError, json.JSONDecodeError) as exc:
            print(f"{self.name}: {exc}", file=sys.stderr)
            return 2
        print(rec.model_dump_json(indent=2))
        if isinstance(rec, GateRecord) and not rec.passed:  # a gate said no: fail, so scripts stop here
            print(f"gate failed: {rec.why}", file=sys.stderr)
            return 1
        return 0


def step(
    fn: Callable[..., Record] | None = None, *, record_as: str | None = None, help: dict[str, str] | None = None
) -> Any:
    """Declare a step: `@step`, or `@step(record_as=..., help={"option": "CLI help"})`."""
    if fn is None:
        return lambda f: Step(f, record_as, help)
    return Step(fn, record_as, help)


def refuse_unknown_conf(context: dict[str, Any]) -> None:
    """Fail a DAG run whose conf names a key the DAG does not declare as a Param: a typo such as
    {"epoch": 5} would otherwise run silently with the defaults. Called by each DAG's first task."""
    declared = sorted(context["dag"].params)
    unknown = sorted(set(context["dag_run"].conf or {}) - set(declared))
    if unknown:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(f"unknown run conf key(s) {unknown}; known: {declared}")


def run_airflow_task(
    ref: str, context: dict[str, Any], overrides: dict[str, dict[str, Any]] | None = None, **options: Any
) -> Record:
    """The body of a step's Airflow task: upstream records from XCom, the record back to XCom.

    `ref` is "tasks.<module>" (its step of the same name) or "tasks.<module>:<step>"."""
    import importlib

    module, _, name = ref.partition(":")
    the_step: Step = getattr(importlib.import_module(module), name or module.rsplit(".", 1)[-1])
    ti = context["ti"]
    ctx = StepContext.create(context["run_id"], overrides=overrides)
    try:
        rec = the_step.run(
            ctx, lambda upstream: ti.xcom_pull(task_ids=upstream, key="result"), task_id=ti.task_id, **options
        )
    except RefusedError as exc:  # refused, nothing changed: a retry cannot help
        from airflow.sdk.exceptions import AirflowFailException

        record_refusal(ctx.run_dir, ti.task_id, str(exc))
        raise AirflowFailException(str(exc)) from exc
    ti.xcom_push(key="result", value=json_safe(rec.model_dump(mode="json")))
    return rec
