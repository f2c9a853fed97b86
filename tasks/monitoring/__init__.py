"""Monitoring across runs (docs/monitoring.md).

store.py           the metrics store: SQLite under SLUICE_HOME/monitoring, versioned schema
watch.py           the hook Step.run wraps every step in: usage, hardware, metrics, costs, alerts
hardware.py        psutil and NVML sampling on a thread while a task runs
feed.py            one function per step record: the metrics it maps to
alerts.py          the rules of params.yaml monitoring.alerts and delivery through Airflow notifiers
cost.py            prices applied: compute, storage, labor, labor avoided, idle-GPU waste
ledger.py          the ledger per task, run and day; the daily report's content
serving_window.py  a day of the model server's prediction log (the business layer between runs)
serving_drift.py   served inputs and scores against the training data's (monitor_serving)

What is measured here is shown by tasks/reports (run summary, HTML report, model cards, page state).
"""
