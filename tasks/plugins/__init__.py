"""Plug-ins, one folder each: everything about one dataset, or one model, in one package.

A dataset plug-in (docs/datasets.md):
    <name>/__init__.py   the dataset module (its protocol: tasks/core/plugins.py)
    <name>/lfs.py        its labeling functions (make_lfs)
    <name>/raw.json      the contract of its landing batches
    <name>/labeled.json  the contract of its labeled batches
    <name>/demo.yaml     its demo's params over params.yaml's (make run DEMO=<name>), if it has a demo

A model plug-in (docs/models.md):
    <name>/__init__.py   the plug-in module, light (no torch at import: params are validated against it)
    <name>/net.py        its torch network

The generic code never imports a plug-in: params.yaml names it by module path and tasks.core.plugins
loads it (make lint holds that). A plug-in imports the generic code it builds on, and its own
modules relatively, so a copied folder is a new plug-in.
"""
