"""The special functions the solver uses, as scipy's own ufuncs, without ``import scipy.special``.

``gammainc``, ``gammaincinv``, ``gammaln``, ``pdtr``, ``pdtrc`` and ``ndtr`` are the cephes/xsf ufuncs
of the compiled module ``scipy.special._ufuncs``: the very objects ``scipy.special`` exports (with
``SCIPY_ARRAY_API`` unset the package re-exports the naked ufuncs), so every value is bit for bit
scipy's. Importing the package itself costs a fresh process ~0.17 s of CPU (docs/startup.md,
round 8): its ``__init__`` builds the array-API wrappers of ~90 functions and parses their
docstrings, none of which these six calls need.

How: while ``scipy.special`` is not yet imported, the real package object is created from its
spec without running its ``__init__`` and ``scipy.special._ufuncs`` is imported into it (the
extension's own initialisation imports only its sibling extension modules, which attach to the
package as usual). The package stays in ``sys.modules`` with a module ``__getattr__`` (PEP 562): the
first name it lacks (``import scipy.special`` followed by any use, ``from scipy.special import X``,
the planner's ``scipy.stats``) runs the package's ``__init__`` in it, once, under the interpreter's
import lock, and answers from the finished package. So the package other code sees is scipy's own,
merely completed late, and its ufuncs are the objects loaded here. Where the package is already
imported, its ``_ufuncs`` is used as is. Error reporting is unchanged: scipy's special-function
errors are ignored by default, and ``scipy.special.errstate`` completes the package first.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable

__all__ = ["gammainc", "gammaincinv", "gammaln", "pdtr", "pdtrc", "ndtr", "load_ufuncs"]


def load_ufuncs() -> types.ModuleType:
    """``scipy.special._ufuncs``; where ``scipy.special`` is not imported yet, its ``__init__`` is
    deferred to the package's first missing attribute (module doc)."""
    done = sys.modules.get("scipy.special._ufuncs")
    if done is not None:
        return done
    import _imp

    _imp.acquire_lock()  # re-entrant for this thread; other threads' imports wait until the package is in place
    try:
        if "scipy.special" not in sys.modules:
            spec = importlib.util.find_spec("scipy.special")
            if spec is None or spec.loader is None:
                raise ImportError("scipy.special is not installed")
            package = importlib.util.module_from_spec(spec)
            package.__getattr__ = _completing(package, spec)
            sys.modules["scipy.special"] = package
            setattr(sys.modules["scipy"], "special", package)
            try:
                return importlib.import_module("scipy.special._ufuncs")
            except ImportError:  # a scipy whose extension needs its package first: the plain import
                for name in [m for m in sys.modules if m == "scipy.special" or m.startswith("scipy.special.")]:
                    del sys.modules[name]
                delattr(sys.modules["scipy"], "special")
        return importlib.import_module("scipy.special._ufuncs")
    finally:
        _imp.release_lock()


def _completing(package: types.ModuleType, spec: importlib.machinery.ModuleSpec) -> Callable[[str], object]:
    """The package's module ``__getattr__`` until its ``__init__`` has run: runs it (once) and answers."""

    def complete(name: str) -> object:
        import _imp

        _imp.acquire_lock()
        try:
            if vars(package).get("__getattr__") is complete:
                del package.__getattr__
                spec.loader.exec_module(package)
        finally:
            _imp.release_lock()
        return getattr(package, name)

    return complete


_UFUNCS = load_ufuncs()
gammainc = _UFUNCS.gammainc
gammaincinv = _UFUNCS.gammaincinv
gammaln = _UFUNCS.gammaln
pdtr = _UFUNCS.pdtr
pdtrc = _UFUNCS.pdtrc
ndtr = _UFUNCS.ndtr
