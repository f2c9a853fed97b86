"""Monitoring across runs (docs/monitoring.md).

store.py           the metrics store: SQLite under SLUICE_HOME/monitoring, versioned schema
watch.py           the hook Step.run wraps every step in: usage, hardware, metrics, costs, alerts
hardware.py        psutil and NVML sampling on a thread while a task runs
feed.py            one function per step record: the metrics it maps to
alerts.py          the rules of params.yaml monitoring.alerts and delivery through Airflow notifiers
cost.py            prices applied: compute, storage, labor, labor avoided, idle-GPU waste
ledger.py          the ledger per task, run and day; the daily report's content
serving_window.py  a day of the model server's prediction log (the business layer between runs)
run_summary.py     the run summary's alerts and cost lines
html_report.py     the HTML run report; model_card.py: model cards (both drawn by tasks/rendering)
pipeline_state.py  the one read model of the pipeline now: ops status, the Sluice page, the report
"""
