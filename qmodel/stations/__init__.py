"""Queueing stations: each a small declared model with its formula in the docstring."""
