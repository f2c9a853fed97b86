"""Data contracts: Great Expectations suites (data_contracts/) run against batches, with readable reports."""
