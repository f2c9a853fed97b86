"""Where plug-ins that moved live now. Registered artifacts (a data version's LF module, a model
file's plug-in, a reproduction's params) and users' params files name module paths as they were when
written; every place a path becomes a module goes through `current`, so those keep loading.
Imports nothing: params validation and plug-in loading both read it."""

from __future__ import annotations

# old module path -> new module path
MOVED = {
    "tasks.datasets.emails": "tasks.plugins.emails",
    "tasks.labeling.email_lfs": "tasks.plugins.emails.lfs",
    "tasks.datasets.reviews": "tasks.plugins.reviews",
    "tasks.labeling.review_lfs": "tasks.plugins.reviews.lfs",
    "tasks.models.mlp": "tasks.plugins.mlp",
    "tasks.models.bow": "tasks.plugins.bow",
    "tasks.models.transformer": "tasks.plugins.transformer",
}


def current(module: str) -> str:
    """The path the plug-in named `module` lives at now (itself, unless it moved)."""
    return MOVED.get(module, module)
