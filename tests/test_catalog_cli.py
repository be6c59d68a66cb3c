"""``qmodel catalog`` CLI: JSON shapes, text output, typo suggestions and exit codes."""

from __future__ import annotations

import json

from qmodel.cli.main import main


def _json(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr().out
    assert rc == 0
    return json.loads(out)


def test_list_json_shape(capsys):
    d = _json(capsys, ["catalog", "list", "--json"])
    assert set(d) == {"schema_version", "models", "gpus", "links", "workloads"}
    assert "llama-3.1-70b" in d["models"] and "h100-sxm" in d["gpus"] and "nvlink-4" in d["links"]
    assert "azure-conv-2023" in d["workloads"]
    assert all(isinstance(n, str) for k, v in d.items() if k != "schema_version" for n in v)


def test_list_text(capsys):
    assert main(["catalog", "list"]) == 0
    out = capsys.readouterr().out
    for word in ("models", "gpus", "links", "workloads", "deepseek-v3", "roce-8x400"):
        assert word in out


def test_show_model_json_has_derived_quantities(capsys):
    d = _json(capsys, ["catalog", "show", "llama-3.1-70b", "--json"])
    assert d["catalog_kind"] == "model" and d["name"] == "llama-3.1-70b"
    assert d["kv_bytes_per_token"] == 327_680
    assert d["weight_bytes"] == 2 * 70_553_706_496
    assert d["human"]["kv_bytes_per_token"].startswith("320 KiB")


def test_show_gpu_and_link_json(capsys):
    g = _json(capsys, ["catalog", "show", "h100-sxm", "--json"])
    assert g["catalog_kind"] == "gpu" and g["memory_bytes"] == 80 * 2**30 and g["human"]["memory"] == "80 GiB"
    link = _json(capsys, ["catalog", "show", "roce-4x200", "--json"])
    assert link["catalog_kind"] == "link" and link["kind"] == "roce"
    assert abs(link["effective_bandwidth_bytes_per_s"] - 87e9) < 1
    assert "800 Gbps" in link["human"]["bandwidth"]
    w = _json(capsys, ["catalog", "show", "fixed-512-64", "--json"])
    assert w["lengths"]["prompt_median_tokens"] == 512 and w["lengths"]["prompt_sigma"] == 0


def test_show_text(capsys):
    assert main(["catalog", "show", "deepseek-v3"]) == 0
    out = capsys.readouterr().out
    assert "kv_bytes_per_token" in out and "70272" in out


def test_typo_suggests_and_exits_2(capsys):
    rc = main(["catalog", "show", "llama-3.1-70"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "llama-3.1-70b" in err and "did you mean" in err
    assert err.count("\n") == 1  # one line, no traceback


def test_kind_restricts_lookup(capsys):
    assert main(["catalog", "show", "h100-sxm", "--kind", "model"]) == 2
    assert "unknown model" in capsys.readouterr().err
