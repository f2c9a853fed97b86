"""Plug-ins, one folder each (docs/datasets.md): everything about one dataset in one package.

    tasks/plugins/<name>/__init__.py   the dataset module (the protocol: tasks/datasets/__init__.py)
    tasks/plugins/<name>/lfs.py        its labeling functions (make_lfs)
    tasks/plugins/<name>/raw.json      the contract of its landing batches
    tasks/plugins/<name>/labeled.json  the contract of its labeled batches
    tasks/plugins/<name>/demo.yaml     its demo's params over params.yaml's (make run DEMO=<name>)

The generic code never imports a plug-in: it is named by module path in params.yaml and loaded
through tasks.datasets (make lint holds that). A plug-in imports the generic code it builds on.
"""
