"""Model serving: the inference server, its traffic split, and the canary analysis."""
