"""The cron schedule of Sluice's DAGs: once unpaused, a DAG's first run waits for its next tick.

Airflow 3.3's `CronTriggerTimetable` documents `run_immediately=False` as "wait to run until the next
scheduled time in the future", but its code treats False like None: a DAG unpaused less than
max(10% of the gap between ticks, 5 minutes) after a tick runs that tick at once
(`airflow/timetables/trigger.py`, `_calc_first_run`). For the nightly cron that is any unpause between
02:00 and 04:24 UTC; for the hourly monitor, the first 6 minutes of every hour. A zero `timedelta` is the
documented False: only an unpause at the tick's very instant runs it.

Imported by DAG files at parse time: Airflow and nothing else.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.timetables.trigger import CronTriggerTimetable


def cron(expression: str) -> CronTriggerTimetable:
    """A UTC cron timetable whose first run is the next tick after the DAG is unpaused."""
    return CronTriggerTimetable(expression, timezone="UTC", run_immediately=timedelta(0))
