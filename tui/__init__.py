"""The what-if terminal UI (installed as qmodel.tui)."""
