"""Distributed training: the model, the torchrun entrypoint, and the launcher."""
