"""Reports: what the pipeline shows people, read from the registry, the run folders and the metrics
store (tasks/monitoring measures; this package renders, through tasks/rendering's templates and plots).

run_summary.py     the run summary (summary.json, the text a run prints): outcome, gates, labeling, costs
html_report.py     the HTML run report (its sections, each with its inputs or what is missing)
model_card.py      a model version's card (markdown and HTML), from its registry record
pipeline_state.py  the one read model of the pipeline now: ops status, the Sluice page, the report
"""
