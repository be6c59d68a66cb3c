"""Command-line interface (see :mod:`qmodel.cli.main`)."""
