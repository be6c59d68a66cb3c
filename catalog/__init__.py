"""Bundled catalog data (TOML): models, GPUs, links, workload presets. Data only."""
