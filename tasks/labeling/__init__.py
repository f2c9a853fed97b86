"""Weak supervision: labeling-function modules per dataset, and the label model."""
