"""Replay engine, trace loaders and the analytic-vs-replay validation harness (installed as qmodel.validation)."""
