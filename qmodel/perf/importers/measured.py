"""splitwise-sim and DistServe tables -> qmodel CSV, through the readers in :mod:`qmodel.perf.tables`.

* **splitwise-sim** ``perf_model.csv``: :func:`~qmodel.perf.tables.load_splitwise` reduces each
  (model, hardware, tp) group to its medians (repeats -> median; physically impossible medians
  left out and named in the header); those medians are written as a ``sweep`` table. Reading it
  back gives a :class:`~qmodel.perf.tables.SweepTableModel` with the same medians, so every step
  time equals the splitwise table's to the last bit.
* **DistServe** profiler JSON: the fitted formula (:class:`~qmodel.perf.tables.DistServeModel`)
  is evaluated on a ``grid``. Prefill: batches 1, 2, 4, 8, 16 x prompt lengths 16..4096 at four
  points per doubling. The formula is linear in the batch at a fixed length, so only the log-log
  interpolation in length differs from it (measured: <= 0.12% between nodes, 2,000 random
  queries per profile, every model/tp of both DistServe files). Decode: batches
  1..256 plus the two sides of DistServe's small/large-batch threshold x contexts 16..4096; the
  formula is linear in context and, within each regime, in the batch, so the grid is exact except
  strictly between ``threshold - 1`` and ``threshold``, where DistServe itself jumps.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from qmodel.errors import InputError
from qmodel.perf.importers import ImportedTable, sha256_file
from qmodel.perf.tables import load_distserve, load_splitwise
from qmodel.settings import resolve_data_path

__all__ = ["import_splitwise", "import_distserve", "DISTSERVE_PROMPTS", "DISTSERVE_CONTEXTS"]

#: prompt lengths of the DistServe prefill grid (four per doubling, 16..4096)
DISTSERVE_PROMPTS: tuple[int, ...] = tuple(sorted({round(16 * 2 ** (k / 4)) for k in range(33)}))
#: contexts of the DistServe decode grid
DISTSERVE_CONTEXTS: tuple[int, ...] = (16, 64, 256, 512, 1024, 2048, 4096)
_PREFILL_BATCHES = (1, 2, 4, 8, 16)
_DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


_CLI_FIELDS = {"perf.model_key": "--model-key", "perf.hardware_key": "--hardware-key", "perf import.tp": "--tp"}


@contextmanager
def _cli_fields() -> Iterator[None]:
    """Name the readers' scenario fields (perf.model_key, ...) as this command's options."""
    try:
        yield
    except InputError as err:
        if err.field in _CLI_FIELDS and err.value is not None:
            raise InputError(_CLI_FIELDS[err.field], err.value, err.allowed) from None
        raise


def import_splitwise(path: str, model_key: str, hardware_key: str, tp: int) -> ImportedTable:
    """The medians of one (model, hardware, tp) group of splitwise-sim's perf_model.csv."""
    p = resolve_data_path(path)
    with _cli_fields():
        m = load_splitwise(p, model_key, hardware_key, tp, field_prefix="perf import")
    notes = [f"splitwise-sim perf_model.csv, medians of the repeats of {model_key} on {hardware_key} at tp {tp}; "
             "decode context per sequence = prompt_size + token_size / 2"]
    for phase, rows in m.suspect.items():
        for r in rows:
            notes.append(f"left out as impossible: {phase} batch {r['batch_size']:g} x {r['length']:g} tokens in "
                         f"{r['time_s']:.4g} s (a smaller batch took {r['slower_smaller_batch_s']:.4g} s)")
    return ImportedTable(
        source="splitwise", layout="sweep", tp=tp, prefill=list(m.prefill_medians), decode=list(m.decode_medians),
        header={"source_file": [f"{Path(p).name} sha256={m.fingerprint}"], "model": model_key,
                "hardware": hardware_key, "method": "medians (qmodel.perf.tables.load_splitwise)", "note": notes})


def import_distserve(path: str, model_key: str, tp: int) -> ImportedTable:
    """DistServe's fitted step-time formula for (model, tp), sampled on a prefill and a decode grid."""
    p = resolve_data_path(path)
    with _cli_fields():
        m = load_distserve(p, model_key, tp, field_prefix="perf import")
    pre = [(float(n), float(q), float(m.prefill_time_s(float(n * q), float(n * q * q), float(n))))
           for n in _PREFILL_BATCHES for q in DISTSERVE_PROMPTS]
    thr = m.threshold
    batches = sorted(set(_DECODE_BATCHES) | ({thr - 1, thr} if thr > 1 else set()))
    dec = [(float(n), float(c), float(m.decode_step_time_s(float(n), float(n * c))))
           for n in batches for c in DISTSERVE_CONTEXTS]
    return ImportedTable(
        source="distserve", layout="grid", tp=tp, prefill=pre, decode=dec,
        header={"source_file": [f"{Path(p).name} sha256={sha256_file(Path(p))}"], "model": model_key,
                "method": "DistServe's fitted formula sampled on the grid (qmodel.perf.tables.DistServeModel)",
                "note": [f"prefill (a + b*sum l + c*sum l^2) ms = {list(m.prefill_coef)}; decode small/large batch "
                         f"{list(m.decode_small)} / {list(m.decode_large)}, threshold {thr}"]})
