"""Applying a tuned overlay (registry tuned-vN) to the train section: what the train step trains with."""

from __future__ import annotations

from typing import Any

from tasks.core.params import TrainParams


def apply_overlay(settings, p: TrainParams) -> tuple[TrainParams, str | None, dict[str, Any] | None]:
    """`p` with its overlay's values (params.yaml `train.params_overlay`: none, latest or tuned-vN,
    resolved now against the registry); returns (params, the tuned-vN applied, the values it set).
    The overlay's values win over params.yaml's train values (a run's `epochs` override included)."""
    if p.params_overlay == "none":
        return p, None, None
    from tasks.core.log import log
    from tasks.registry.tuning import TunedOverlays

    overlays = TunedOverlays(settings)
    version = overlays.resolve_overlay(p.params_overlay)
    if version is None:
        log("train.params_overlay is 'latest' but the registry has no tuned overlay yet: params.yaml's values")
        return p, None, None
    values = overlays.overlay_info(version)["train"]
    log(f"training with tuned overlay {version}: {values}")
    return p.replace(**values, params_overlay=version), version, values
