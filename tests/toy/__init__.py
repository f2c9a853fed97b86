"""A second dataset, made up for the tests: proof that a dataset plugs in with no pipeline change."""
