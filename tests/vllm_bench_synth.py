"""A synthetic ``vllm bench serve`` result JSON generated from a known step-time model (for the fit tests).

Run at concurrency ``C``: waves of ``C`` requests that decode in lockstep, wave ``w`` with prompt
``prompts[w]`` and ``outputs`` tokens. At ``C = 1`` the TTFT is exactly the batch-1 prefill
``a + b p + c p^2``; at ``C > 1`` it is ``C`` times that (a batched prefill; the fit does not use
those runs' TTFTs). The ``k``-th ITL (1-based) is one decode step of ``C`` sequences holding
``p + k - 1`` tokens each: ``h(C) + ctx_cost * C * (p + k - 1)``. ``duration`` is the sum of one
wave member's ITLs, so the Little's-law mean decode batch is exactly ``C``.
"""

from __future__ import annotations

import json
from pathlib import Path

#: the known model: prefill a + b p + c p^2 (s), decode h0 + h1 * n + ctx_cost * S (s)
PREFILL = (0.004, 2.0e-5, 3.0e-9)
DECODE_H = (0.006, 4.0e-5)
CTX_COST = 2.5e-8
PROMPTS = (64, 128, 200, 512, 900, 1500, 2048, 3000, 4096)


def prefill_s(p: float) -> float:
    a, b, c = PREFILL
    return a + b * p + c * p * p


def decode_s(n: float, sum_ctx: float) -> float:
    return DECODE_H[0] + DECODE_H[1] * n + CTX_COST * sum_ctx


def write_run(path: Path, concurrency: int, outputs: int = 33, prompts: tuple[int, ...] = PROMPTS) -> Path:
    ins, outs, ttfts, itls, errors = [], [], [], [], []
    duration = 0.0
    for p in prompts:
        row = [decode_s(concurrency, concurrency * (p + k - 1)) for k in range(1, outputs)]
        duration += sum(row)
        for _ in range(concurrency):
            ins.append(p)
            outs.append(outputs)
            ttfts.append(concurrency * prefill_s(p))
            itls.append(row)
            errors.append("")
    # one failed request, as vLLM records it (ttft 0, an error string): it must be left out
    ins.append(100); outs.append(0); ttfts.append(0.0); itls.append([]); errors.append("timeout")
    doc = {"backend": "vllm", "model_id": "synthetic", "max_concurrency": concurrency, "duration": duration,
           "completed": len(ins) - 1, "input_lens": ins, "output_lens": outs, "ttfts": ttfts, "itls": itls,
           "errors": errors}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path
