"""Data contracts: Great Expectations suites (a dataset plug-in's raw.json, labeled.json), with readable reports."""
