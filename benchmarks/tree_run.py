"""Run one qmodel tree by itself in a subprocess: the ``--against REV`` benchmarks put a worktree of
REV on ``PYTHONPATH``, which gives its ``qmodel`` package, but ``qmodel.validation``, ``qmodel.catalog``,
``qmodel.tui`` and ``qmodel.examples`` live at the top of the repository and are mapped by the
editable install's finder, which points at the tree the virtual environment was installed from.
Without :data:`PIN` a baseline run would load the current tree's trace loaders, catalog and TUI
(measured: REV's ``qmodel.validation.traces`` came from this tree), so a change there compared
with itself. :data:`PIN` is Python source that puts a finder first on ``sys.meta_path`` mapping
those four packages to the folders of the same names in the first ``PYTHONPATH`` entry; it does
nothing when ``PYTHONPATH`` is unset (the current tree, as installed).
"""

from __future__ import annotations

__all__ = ["PIN", "CLI_CODE", "pin"]

PIN = (
    "import os as _o, sys as _s, importlib.machinery as _m\n"
    "class _TreeFinder:\n"
    "    root = (_o.environ.get('PYTHONPATH') or '').split(_o.pathsep)[0]\n"
    "    @classmethod\n"
    "    def find_spec(cls, name, path=None, target=None):\n"
    "        if cls.root and name in ('qmodel.validation', 'qmodel.catalog', 'qmodel.tui', 'qmodel.examples'):\n"
    "            return _m.PathFinder.find_spec(name, [cls.root])\n"
    "        return None\n"
    "_s.meta_path.insert(0, _TreeFinder)\n"
)

#: the console script's code, with the tree pinned
CLI_CODE = PIN + "from qmodel.cli.main import main\n_s.exit(main())\n"


def pin() -> None:
    """Install the finder of :data:`PIN` in this process (before qmodel is imported)."""
    exec(PIN, {})
