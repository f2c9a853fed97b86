"""Errors every layer shares."""

from __future__ import annotations


class RefusedError(RuntimeError):
    """A store refused an operation and changed nothing (RegistryError derives from it): a step's CLI
    prints its one-line reason, and its Airflow task fails without a retry (retrying cannot help)."""
