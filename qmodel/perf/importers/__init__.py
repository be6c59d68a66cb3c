"""``qmodel perf import``: measured step-time sources -> one qmodel CSV table.

Each source module returns an :class:`ImportedTable` (rows plus a provenance header):

=================  =====================================================  ==========
source             module                                                 layout
=================  =====================================================  ==========
``aic``            :mod:`qmodel.perf.importers.aic` (optional extra)      grid
``vidur``          :mod:`qmodel.perf.importers.vidur`                     grid
``splitwise``      :mod:`qmodel.perf.importers.measured` (splitwise-sim)  sweep
``distserve``      :mod:`qmodel.perf.importers.measured` (DistServe)      grid
``vllm-bench``     :mod:`qmodel.perf.importers.vllm_bench`                sweep
=================  =====================================================  ==========

The written file is a qmodel CSV (:mod:`qmodel.perf.tables`) with the header of
:mod:`qmodel.perf.table_header`; a scenario reads it with ``perf: {kind: table, path: ...}``.
:meth:`ImportedTable.to_model` builds the same step-time model in memory (same class, same
SHA-256 as reading the written bytes back), which is what ``qmodel calibrate`` fits to.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from qmodel.errors import DataError
from qmodel.perf.base import ServiceTimeModel
from qmodel.perf.table_header import format_header

__all__ = ["ImportedTable", "SOURCES", "sha256_file", "sha256_tree"]

#: the source names ``qmodel perf import`` accepts
SOURCES = ("aic", "vidur", "splitwise", "distserve", "vllm-bench")

_COLUMNS = "phase,batch_size,prompt_tokens,context_tokens,time_s,tp"


def sha256_file(path: Path) -> str:
    """SHA-256 of a file's bytes (a missing or unreadable file is a one-line DataError)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as err:
        raise DataError(str(path), f"cannot read ({err.strerror or err})") from None


def sha256_tree(root: Path, files: list[Path]) -> str:
    """One SHA-256 over several files: of the lines ``<relative path> <sha256>``, sorted by path."""
    lines = sorted(f"{f.relative_to(root).as_posix()} {sha256_file(f)}" for f in files)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _fmt(x: float) -> str:
    """Shortest exact text of a float (integers without '.0'), so a re-read table is bit-identical."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**53 else repr(float(x))


class ImportedTable(BaseModel):
    """Rows of one (model, hardware, tp) table and the header that says where they come from."""

    model_config = ConfigDict(frozen=True)

    source: str = Field(description="importer name, one of SOURCES")
    layout: Literal["sweep", "grid"]
    tp: int = Field(ge=1)
    prefill: list[tuple[float, float, float]] = Field(description="(batch size, prompt tokens per request, seconds)")
    decode: list[tuple[float, float, float]] = Field(description="(batch size, context tokens per sequence, seconds)")
    header: dict[str, str | list[str]] = Field(default_factory=dict, description="provenance fields, in order")

    def to_csv(self) -> str:
        """The qmodel CSV text: header, column line, prefill rows then decode rows (deterministic)."""
        fields: dict[str, str | list[str]] = {"layout": self.layout, "source": self.source, "tp": str(self.tp)}
        fields.update(self.header)
        out = [format_header(fields), _COLUMNS + "\n"]
        for n, p, t in self.prefill:
            out.append(f"prefill,{_fmt(n)},{_fmt(p)},,{_fmt(t)},{self.tp}\n")
        for n, c, t in self.decode:
            out.append(f"decode,{_fmt(n)},,{_fmt(c)},{_fmt(t)},{self.tp}\n")
        return "".join(out)

    def sha256(self) -> str:
        """SHA-256 of :meth:`to_csv`'s UTF-8 bytes (the ``fingerprint`` of the table once written)."""
        return hashlib.sha256(self.to_csv().encode()).hexdigest()

    def write(self, path: str | Path) -> str:
        """Write the table to ``path``; returns its SHA-256."""
        p = Path(path)
        try:
            p.write_text(self.to_csv(), encoding="utf-8")
        except OSError as err:
            raise DataError(str(p), f"cannot write ({err.strerror or err})") from None
        return self.sha256()

    def to_model(self) -> ServiceTimeModel:
        """The step-time model a scenario gets from the written file (same class and fingerprint)."""
        from qmodel.perf.grid import GridTableModel
        from qmodel.perf.table_header import parse_header
        from qmodel.perf.tables import SweepTableModel

        text = self.to_csv()
        keys: dict[str, object] = {"model_key": None, "hardware_key": None, "tp": self.tp,
                                   "provenance": parse_header(text)}
        sha = hashlib.sha256(text.encode()).hexdigest()
        src = f"perf import {self.source}"
        if self.layout == "grid":
            return GridTableModel(self.prefill, self.decode, sha256=sha, source=src, kind="table:qmodel-grid", keys=keys)
        return SweepTableModel(self.prefill, self.decode, sha256=sha, source=src, kind="table:qmodel", keys=keys)
