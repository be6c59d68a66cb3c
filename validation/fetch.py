"""``qmodel trace fetch``: download public traces and tables, pinned by commit and SHA-256.

Each entry names the upstream repository, the commit read and the path in it; the checksum is
of the file bytes (the same bytes the project's shared data folder holds). Files land under
``qmodel.settings.cache_dir()/data/<relative path>`` (or ``dest/<relative path>``), the layout
of the data folder, so ``data:azure_llm_2023/AzureLLMInferenceTrace_conv.csv`` resolves to a
fetched file when no other data folder exists.

Downloads go to a temporary file beside the target, hashed while streaming; the target is
replaced only after the checksum matches, and a mismatch removes the download and raises
:class:`~qmodel.errors.DataError`. A present file with the right checksum is not fetched again;
one with a wrong checksum is deleted before downloading.

Mirrors: ``base_url=`` or ``QMODEL_FETCH_BASE_URL`` replaces the upstream URL with
``<base>/<relative path>``, e.g. a web server that serves a copy of the data folder (tests use a
local ``http.server`` on 127.0.0.1).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from qmodel.errors import CatalogError, DataError, InputError, NetworkError

__all__ = ["Dataset", "DATASETS", "FetchResult", "get_dataset", "dataset_for", "url_for", "target_path", "fetch",
           "sha256_file"]

BASE_URL_ENV = "QMODEL_FETCH_BASE_URL"
_RAW = "https://raw.githubusercontent.com"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Dataset:
    """One public file: where it lives upstream and what its bytes hash to."""

    name: str
    rel_path: str  # path under the data folder
    repo: str  # owner/name on GitHub
    commit: str  # the commit whose blob was checked
    upstream_path: str  # path inside the repository
    sha256: str
    size_bytes: int
    licence: str
    description: str

    @property
    def upstream_url(self) -> str:
        return f"{_RAW}/{self.repo}/{self.commit}/{self.upstream_path}"


_AZURE = ("Azure/AzurePublicDataset", "b469a113cedca53ddc3bdea71a143dc4b7d8700c", "CC-BY-4.0")
_MOON = ("kvcache-ai/Mooncake", "3b5a594133958449a1feaf1c9e0fc1b553e34a28", "Apache-2.0")
_DIST = ("LLMServe/DistServe", "82831f1604cc6b10bebd360f6c437a07790dde9f", "Apache-2.0")
_DIST_DIR = "simdistserve/estimators/profile_data"

DATASETS: dict[str, Dataset] = {d.name: d for d in [
    Dataset("azure-conv-2023", "azure_llm_2023/AzureLLMInferenceTrace_conv.csv", *_AZURE[:2],
            "data/AzureLLMInferenceTrace_conv.csv",
            "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8", 719_188, _AZURE[2],
            "Azure LLM inference trace 2023, conversation: 19,366 requests in 1 h"),
    Dataset("azure-code-2023", "azure_llm_2023/AzureLLMInferenceTrace_code.csv", *_AZURE[:2],
            "data/AzureLLMInferenceTrace_code.csv",
            "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6", 320_117, _AZURE[2],
            "Azure LLM inference trace 2023, code: 8,819 requests in 1 h, very bursty"),
    Dataset("mooncake-conv", "mooncake/conversation_trace.jsonl", *_MOON[:2],
            "FAST25-release/traces/conversation_trace.jsonl",
            "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df", 3_029_533, _MOON[2],
            "Mooncake FAST'25 conversation trace: 12,031 requests with prefix-block hashes (3 s slots)"),
    Dataset("mooncake-synthetic", "mooncake/synthetic_trace.jsonl", *_MOON[:2],
            "FAST25-release/traces/synthetic_trace.jsonl",
            "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131", 1_136_313, _MOON[2],
            "Mooncake FAST'25 synthetic trace: 3,993 Poisson arrivals with prefix-block hashes"),
    Dataset("sharegpt-lengths", "length_distributions/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
            "microsoft/sarathi-serve", "72339db5b120614033b317880ad3a05a5e4c9415",
            "data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
            "6d6c296302a853e2669a674a96f269283e60c57e60363bd450588a1066919f9f", 949_600, "Apache-2.0",
            "ShareGPT (prompt, output) token lengths, Llama-2 tokenizer, 30,731 rows (lengths only)"),
    Dataset("arxiv-summarization-lengths",
            "vidur/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
            "microsoft/vidur", "7d47513363ec447a741ac5e47241580b47724fbf",
            "data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
            "9d3580538d915ca75e4aaaa54590b42dbb17abc6d74c8913310cf07c232adcdc", 884_932, "MIT",
            "arXiv-summarization token lengths (Vidur), 28,257 rows (lengths only)"),
    Dataset("splitwise-perf-model", "splitwise_sim/perf_model.csv",
            "Mutinifni/splitwise-sim", "8f99e7dc9b407f4ce2488d03dd44c0b8b946dab0", "data/perf_model.csv",
            "dbbe505d1d64fc4bd1ec03c50edf944643586de4f68a81e94cbd55dd5bdfbf41", 127_281, "MIT",
            "splitwise-sim measured prefill/decode times, Llama2-70B and BLOOM-176B on A100/H100"),
    Dataset("distserve-profile-distserve", "distserve/profiler-a100-80g.distserve.json", *_DIST[:2],
            f"{_DIST_DIR}/profiler-a100-80g.distserve.json",
            "f5daa7346d6c0e3a69a830ac4ece11432891e09d610bcf3125d916c48b31f512", 3_038, _DIST[2],
            "DistServe fitted step-time coefficients, OPT-13B/66B on A100-80GB (DistServe engine)"),
    Dataset("distserve-profile-vllm", "distserve/profiler-a100-80g.vllm.json", *_DIST[:2],
            f"{_DIST_DIR}/profiler-a100-80g.vllm.json",
            "ab24e00e0e1165fc45c9fbaeaa36aeb1f67cfe21d3961cb995b385a31c95f751", 3_031, _DIST[2],
            "DistServe fitted step-time coefficients, OPT-13B/66B on A100-80GB (vLLM engine)"),
    Dataset("distserve-max-num-tokens", "distserve/max_num_tokens.csv", *_DIST[:2],
            f"{_DIST_DIR}/max_num_tokens.csv",
            "7a70549e4235a6d45fec6a311a5acf3078c1e5400709450e09afcb8be9ca09d3", 2_181, _DIST[2],
            "DistServe KV-cache capacity in tokens per (model, TP, PP) on A100-80GB"),
    Dataset("aiconfigurator-silicon-sample", "aiconfigurator/silicon_sample.csv",
            "ai-dynamo/aiconfigurator", "095f58a51c4ca8e61b66ec108d86f223f8d559ce",
            "aic-core/src/aiconfigurator_core/systems/silicon_sample.csv",
            "4240bfaf555b6f8b2c62512074e5efbb7791cdbb0344b068408f397588499adb", 1_895_632, "Apache-2.0",
            "aiconfigurator: 5,221 measured end-to-end TTFT/TPOT rows"),
]}


@dataclass(frozen=True)
class FetchResult:
    name: str
    path: Path
    url: str
    downloaded: bool  # False when a verified copy was already there
    size_bytes: int


def get_dataset(name: str) -> Dataset:
    try:
        return DATASETS[name]
    except KeyError:
        raise CatalogError("trace", name, DATASETS) from None


def dataset_for(rel_path: str) -> Dataset | None:
    """The dataset whose file lands at ``rel_path`` under the data folder, if the registry has one."""
    return next((ds for ds in DATASETS.values() if ds.rel_path == rel_path), None)


def url_for(ds: Dataset, base_url: str | None = None) -> str:
    base = base_url if base_url is not None else os.environ.get(BASE_URL_ENV) or None
    if not base:
        return ds.upstream_url
    scheme = urllib.parse.urlsplit(base).scheme
    if scheme not in ("http", "https", "file"):
        raise InputError("--base-url", base, "an http://, https:// or file:// URL")
    return base.rstrip("/") + "/" + urllib.parse.quote(ds.rel_path)


def target_path(ds: Dataset, dest: str | Path | None = None) -> Path:
    if dest is None:
        from qmodel.settings import cache_dir

        root = cache_dir() / "data"
    else:
        root = Path(dest).expanduser()
    return root / ds.rel_path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _download(url: str, out: Path, timeout_s: float, by_hand: str) -> str:
    """Stream ``url`` into ``out``; the SHA-256 of what arrived.

    A server that answers with an HTTP error is a :class:`DataError` (the file is not where the URL
    says); one that cannot be reached is a :class:`NetworkError` whose message ends with ``by_hand``.
    """
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp, out.open("wb") as fh:  # noqa: S310 - scheme checked
            for chunk in iter(lambda: resp.read(_CHUNK), b""):
                h.update(chunk)
                fh.write(chunk)
    except urllib.error.HTTPError as err:
        raise DataError(url, f"download failed: HTTP {err.code} {err.reason}") from None
    except urllib.error.URLError as err:
        raise NetworkError(f"cannot reach {_host(url)} ({err.reason}); {by_hand}") from None
    except (TimeoutError, OSError) as err:
        raise NetworkError(f"cannot reach {_host(url)} ({err}); {by_hand}") from None
    return h.hexdigest()


def _host(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts.netloc or parts.path or url


def fetch(name: str, dest: str | Path | None = None, base_url: str | None = None, *,
          timeout_s: float = 60.0) -> FetchResult:
    """Download one dataset (idempotent; verified by SHA-256). See the module docstring."""
    ds = get_dataset(name)
    url = url_for(ds, base_url)
    target = target_path(ds, dest)
    if target.is_file():
        if sha256_file(target) == ds.sha256:
            return FetchResult(ds.name, target, url, False, target.stat().st_size)
        # A corrupt or stale copy must not stay where data_dir() would find and trust it.
        target.unlink()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    except OSError as err:
        raise DataError(str(target.parent), f"cannot write there ({err.strerror})") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        by_hand = (f"download {url} yourself and place it at {target}, "
                   "or pass --base-url (or QMODEL_FETCH_BASE_URL) to a mirror")
        got = _download(url, tmp, timeout_s, by_hand)
        if got != ds.sha256:
            raise DataError(url, f"checksum mismatch for {ds.name}: got sha256 {got}, expected {ds.sha256}; "
                                 "the download was removed")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return FetchResult(ds.name, target, url, True, target.stat().st_size)
