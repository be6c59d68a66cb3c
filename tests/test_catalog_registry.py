"""The bundled catalog: names, counts, sources, cross-references, lookups and the user folder."""

from __future__ import annotations

import pytest

from qmodel.errors import CatalogError, DataError
from qmodel.registry import clear_cache, get_gpu, get_link, get_model, get_workload, load_catalog

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "llama-2-7b",
          "llama-2-13b", "llama-2-70b", "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-32b",
          "qwen2.5-72b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b",
          "opt-13b", "opt-66b", "opt-175b", "bloom-176b", "deepseek-r1-0528", "deepseek-v3.1", "glm-4.5", "glm-4.6",
          "glm-4.5-air", "kimi-k2", "kimi-k2.5", "llama-4-scout", "llama-4-maverick", "gpt-oss-20b", "mistral-large-2411",
          "mistral-small-3.1-24b", "gemma-3-1b", "gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "qwen3-4b", "qwen3-14b",
          "phi-4", "qwen3-vl-8b", "mimo-7b"]
GPUS = ["a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie", "h100-sxm", "h100-pcie", "h200-sxm", "b200", "l40s",
        "l4", "rtx-4090", "mi300x", "mi325x", "a10g", "gh200", "a30", "b300", "h800-sxm", "h20", "l20", "gb200", "gb300",
        "mi355x", "rtx-pro-6000-server", "arc-pro-b60"]
LINKS = ["pcie-gen4-x16", "pcie-gen5-x16", "nvlink-3", "nvlink-4", "nvlink-5", "ib-hdr-200", "ib-ndr-400",
         "roce-4x200", "roce-8x400", "roce-8x400-nixl", "eth-10g-tcp", "eth-25g-tcp", "eth-100g-tcp", "wan-100g",
         "nvlink-4-h800", "pcie-gen5-x8", "xgmi-mi300", "xgmi-mi355"]
WORKLOADS = ["azure-conv-2023", "azure-code-2023", "mooncake-conv", "sharegpt", "fixed-512-64"]


def test_counts():
    names = load_catalog().names()
    assert len(names["models"]) >= 60
    assert len(names["gpus"]) >= 24
    assert len(names["links"]) >= 18
    assert len(names["workloads"]) >= 5


def test_fixed_names_all_present():
    names = load_catalog().names()
    assert set(MODELS) <= set(names["models"])
    assert set(GPUS) <= set(names["gpus"])
    assert set(LINKS) <= set(names["links"])
    assert set(WORKLOADS) <= set(names["workloads"])


def test_every_entry_has_a_source():
    cat = load_catalog()
    for bucket in (cat.models, cat.gpus, cat.links, cat.workloads):
        for entry in bucket.values():
            assert entry.source.strip(), entry.name


def test_gpu_links_and_prices_are_consistent():
    cat = load_catalog()
    for g in cat.gpus.values():
        assert g.intra_node_link in cat.links, g.name
        # the GPU's per-direction scale-up bandwidth is its link's nominal bandwidth
        assert g.intra_node_bandwidth_bytes_per_s == cat.links[g.intra_node_link].bandwidth_bytes_per_s, g.name
        if g.price_usd_per_hour is not None:
            assert g.price_source and g.price_date


def test_gpu_conventions():
    # Memory is binary GiB (NVIDIA/AMD "80GB" HBM): see the header of catalog/gpus.toml.
    assert get_gpu("h100-sxm").memory_bytes == 80 * 2**30
    assert get_gpu("h200-sxm").memory_bytes == 141 * 2**30
    # Dense, not 2:4 sparse: H100 SXM BF16 is 989 TFLOPS dense (1,979 sparse).
    assert get_gpu("h100-sxm").bf16_flops_per_s == 989e12
    assert get_gpu("h100-sxm").flops_per_s("fp8") == 1979e12
    assert get_gpu("a100-80gb-sxm").flops_per_s("fp8") == 312e12  # no FP8 units: falls back to BF16
    assert get_gpu("b200").flops_per_s("nvfp4") == 9000e12


def test_every_gpu_names_its_architecture():
    """Step-time efficiency curves are shared per chip generation, so no GPU may fall to "other"."""
    expected = {"h100-sxm": "hopper", "h200-sxm": "hopper", "a100-80gb-sxm": "ampere", "b200": "blackwell",
                "l40s": "ada", "mi300x": "cdna3"}
    for g in load_catalog().gpus.values():
        assert g.architecture != "other", g.name
    for name, arch in expected.items():
        assert get_gpu(name).architecture == arch


def test_mooncake_link_efficiencies():
    # Mooncake (FAST'25): 87 GB/s on 4x200 Gbps, 190 GB/s on 8x400 Gbps.
    assert get_link("roce-4x200").effective_bandwidth_bytes_per_s == pytest.approx(87e9, rel=1e-12)
    assert get_link("roce-8x400").effective_bandwidth_bytes_per_s == pytest.approx(190e9, rel=1e-12)
    assert get_link("ib-ndr-400").bandwidth_bytes_per_s == 50e9  # 400 Gb/s is 50 GB/s
    assert get_link("wan-100g").latency_s >= 1e-3


def test_lookup_is_case_insensitive():
    assert get_model("Llama-3.1-70B").name == "llama-3.1-70b"


def test_unknown_name_suggests_close_names():
    with pytest.raises(CatalogError) as info:
        get_model("llama-3.1-70")
    assert "llama-3.1-70b" in info.value.suggestions
    assert info.value.exit_code == 2
    with pytest.raises(CatalogError, match="h100-sxm"):
        get_gpu("h100sxm")
    with pytest.raises(CatalogError):
        get_workload("azure")


def test_user_catalog_overrides_and_adds(tmp_path, monkeypatch):
    (tmp_path / "mine.toml").write_text(
        '[[link]]\nname = "nvlink-4"\nkind = "nvlink"\nsource = "my measurement"\n'
        'bandwidth_bytes_per_s = "450 GB/s"\nlatency_s = "5 us"\nefficiency = 0.7\n'
        '[[gpu]]\nname = "my-gpu"\nvendor = "other"\nsource = "lab"\nmemory_bytes = "16 GiB"\n'
        'memory_bandwidth_bytes_per_s = "500 GB/s"\nbf16_flops_per_s = "100 TFLOPS"\n'
        'intra_node_bandwidth_bytes_per_s = "32 GB/s"\ntdp_watts = "200 W"\n')
    monkeypatch.setenv("QMODEL_CATALOG_DIR", str(tmp_path))
    clear_cache()
    assert get_link("nvlink-4").efficiency == 0.7
    assert get_gpu("my-gpu").memory_bytes == 16 * 2**30


def test_bad_user_file_is_one_line_data_error(tmp_path, monkeypatch):
    (tmp_path / "bad.toml").write_text('[[model]]\nname = "x"\nsource = "s"\nlayers = "many"\n')
    monkeypatch.setenv("QMODEL_CATALOG_DIR", str(tmp_path))
    clear_cache()
    with pytest.raises(DataError) as info:
        load_catalog()
    assert "\n" not in str(info.value) and "layers" in str(info.value)


def test_duplicate_user_names_are_rejected(tmp_path, monkeypatch):
    link = ('[[link]]\nname = "dup"\nkind = "pcie"\nsource = "s"\nbandwidth_bytes_per_s = "1 GB/s"\n'
            'latency_s = 0\nefficiency = 1\n')
    (tmp_path / "a.toml").write_text(link)
    (tmp_path / "b.toml").write_text(link)
    monkeypatch.setenv("QMODEL_CATALOG_DIR", str(tmp_path))
    clear_cache()
    with pytest.raises(DataError, match="already defined"):
        load_catalog()


def test_bundled_origin_names_the_subfolder():
    from qmodel.registry import _bundled_files

    origins = [o for o, _ in _bundled_files()]
    assert "qmodel.catalog/models/llama.toml" in origins and "qmodel.catalog/gpus.toml" in origins
