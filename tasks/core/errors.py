"""Errors every layer shares."""

from __future__ import annotations


class RefusedError(RuntimeError):
    """A store refused an operation and changed nothing (RegistryError derives from it): a step's CLI
    prints its one-line reason, and its Airflow task fails without a retry (retrying cannot help)."""


class StepError(RuntimeError):
    """A step cannot run: an upstream record is missing or malformed."""


class CompressionError(ValueError):
    """Bad compression input: a config out of range, a chain out of order, an unusable
    calibration set, or a model onnxruntime cannot run. The message names the cause."""
