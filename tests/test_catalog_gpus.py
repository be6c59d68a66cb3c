"""Catalog GPUs: AIConfigurator's systems, the issue-17 additions, datasheet conventions, links.

Every system in AIConfigurator's database (data:aiconfigurator/systems/*.yaml) has a catalog GPU;
where the catalog entry cites that file, its memory bandwidth and dense BF16 rate equal the file's
(the same datasheet figure) to 0.1%.
"""

from __future__ import annotations

import pytest

from qmodel.registry import get_gpu, load_catalog

#: AIConfigurator system file stem -> catalog GPU
AIC_SYSTEMS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "b300_sxm": "b300",
               "gb200": "gb200", "gb300": "gb300", "a100_sxm": "a100-80gb-sxm", "a100_pcie": "a100-80gb-pcie",
               "h100_pcie": "h100-pcie", "l40s": "l40s", "l4": "l4", "a30": "a30",
               "rtx_pro_6000_server": "rtx-pro-6000-server", "b60": "arc-pro-b60"}
ISSUE_17 = {"h800-sxm": "hopper", "h20": "hopper", "l20": "ada", "gb200": "blackwell", "gb300": "blackwell",
            "mi355x": "cdna4", "rtx-pro-6000-server": "blackwell", "mi300x": "cdna3", "mi325x": "cdna3"}


def test_every_aic_system_and_issue_gpu_is_in_the_catalog():
    gpus = load_catalog().gpus
    for name in list(AIC_SYSTEMS.values()) + list(ISSUE_17):
        assert name in gpus, name
    for name, arch in ISSUE_17.items():
        assert get_gpu(name).architecture == arch


@pytest.mark.needs_data("aiconfigurator/systems/h100_sxm.yaml")
def test_aic_system_files_all_mapped_and_agree(data_dir):
    import yaml

    files = sorted((data_dir / "aiconfigurator" / "systems").glob("*.yaml"))
    assert {f.stem for f in files} <= set(AIC_SYSTEMS), "an AIC system without a catalog GPU"
    for f in files:
        g = get_gpu(AIC_SYSTEMS[f.stem])
        gpu = yaml.safe_load(f.read_text())["gpu"]
        if f"aiconfigurator/systems/{f.stem}.yaml" in g.source:
            assert g.memory_bandwidth_bytes_per_s == pytest.approx(gpu["mem_bw"], rel=1e-3), f.stem
            assert g.bf16_flops_per_s == pytest.approx(gpu["bfloat16_tc_flops"], rel=1e-3), f.stem


def test_datasheet_conventions_of_new_gpus():
    assert get_gpu("h800-sxm").intra_node_bandwidth_bytes_per_s == 200e9  # 400 GB/s bidirectional
    assert get_gpu("h20").bf16_flops_per_s == 148e12 and get_gpu("h20").memory_bytes == 96 * 2**30
    assert get_gpu("mi355x").flops_per_s("fp8") == 5033.2e12  # dense, not the 2:4 figure
    assert get_gpu("gb300").flops_per_s("nvfp4") == 15000e12
    b60 = get_gpu("arc-pro-b60")
    assert b60.vendor == "intel" and b60.flops_per_s("fp8") == b60.bf16_flops_per_s  # no FP8 units
