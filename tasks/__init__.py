"""Sluice pipeline steps: one plain, importable module per step, each with a CLI."""
