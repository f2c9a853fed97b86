"""The one error type of the compression library: a message that names the cause."""

from __future__ import annotations


class CompressionError(ValueError):
    """Bad compression input: a config out of range, a chain out of order, an unusable
    calibration set, or a model onnxruntime cannot run. The message names the cause."""
