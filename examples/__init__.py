"""Bundled example scenarios (installed as ``qmodel.examples``; ``qmodel examples list|copy``)."""
