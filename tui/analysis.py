"""The values the TUI's stages produce and its panes draw (:mod:`qmodel.tui.compute` computes them):
the :class:`Analysis` of one scenario with its plotted distributions, topology curves and P:D grid,
and the replay check. Frozen: a stage returns a new analysis, so a pane never sees one half-built."""

from __future__ import annotations

from dataclasses import dataclass, field

from qmodel.result import Goodput, Result, Sensitivity
from qmodel.scenario import Scenario

__all__ = ["Cancelled", "DistCurve", "Curve", "Heatmap", "UnstableInfo", "Analysis", "ReplayCheck"]


class Cancelled(Exception):
    """The inputs changed while a stage ran; its answer is no longer wanted."""


@dataclass(frozen=True)
class DistCurve:
    """A latency distribution sampled for plotting: CDF on a uniform grid over [0, x_max_s]."""

    x_s: tuple[float, ...]
    cdf: tuple[float, ...]
    p50_s: float
    p90_s: float
    p99_s: float
    target_s: float


@dataclass(frozen=True)
class Curve:
    """Attainment vs arrival rate for one topology on the scenario's GPUs."""

    topology: str
    layout: str
    rates: tuple[float, ...]
    attainment: tuple[float, ...]
    goodput_rps: float
    knee_rps: float
    max_stable_rate_per_s: float
    note: str = ""


@dataclass(frozen=True)
class Heatmap:
    """Goodput (req/s) on a prefill-instances x decode-instances grid; None marks a failed cell."""

    gpu: str
    tp: int
    prefill: tuple[int, ...]
    decode: tuple[int, ...]
    goodput: tuple[tuple[float | None, ...], ...]  # [i_decode][j_prefill]
    current: tuple[int, int] | None
    best_per_gpu: tuple[int, int, float] | None  # (P, D, goodput per GPU)
    complete: bool = True  # False while rows are still being computed (``goodput`` has the rows so far)


@dataclass(frozen=True)
class UnstableInfo:
    station: str
    rate_per_s: float
    max_stable_rate_per_s: float
    message: str


@dataclass(frozen=True)
class Analysis:
    """Everything the results, plots and compare views show for one scenario."""

    scenario: Scenario
    sha256: str
    result: Result | None = None
    error: str | None = None
    error_path: str | None = None
    unstable: UnstableInfo | None = None
    max_stable: tuple[float, str] | None = None
    ttft: DistCurve | None = None
    tpot: DistCurve | None = None
    goodput: Goodput | None = None
    usd_per_mtok: float | None = None
    mean_output_tokens: float | None = None
    curves: tuple[Curve, ...] | None = None
    heatmap: Heatmap | None = None
    sensitivities: tuple[Sensitivity, ...] | None = None
    stage_errors: dict[str, str] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ReplayCheck:
    """Analytic vs replay at the scenario's rate (rows: metric, analytic, replay, difference)."""

    rate_per_s: float
    requests: int
    seed: int
    rows: tuple[tuple[str, float, float, float], ...]
    stations: tuple[tuple[str, float, float, float], ...]
    elapsed_s: float
