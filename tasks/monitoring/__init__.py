"""Monitoring across runs: the metrics store, alerts, the cost ledger and run reports (not built yet)."""
