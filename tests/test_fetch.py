"""``qmodel trace fetch`` against a local HTTP server on 127.0.0.1 (never the internet):
success, idempotence, checksum mismatch (file removed), unknown names (suggestions)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
from pathlib import Path

import pytest

from qmodel.cli.main import main
from qmodel.errors import CatalogError, DataError, InputError
from qmodel.validation import fetch as fetch_mod
from qmodel.validation.fetch import DATASETS, Dataset, fetch, url_for


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep test output clean
        pass


@pytest.fixture()
def serve():
    """serve(folder) -> base URL of an HTTP server on 127.0.0.1 (port 0) serving that folder."""
    servers = []

    def start(folder: Path) -> str:
        handler = functools.partial(_Quiet, directory=str(folder))
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


@pytest.fixture()
def tiny(monkeypatch, tmp_path):
    """A registry entry for a small file served from tmp_path/mirror (independent of shared data)."""
    body = b"arrival_s,prompt_tokens,output_tokens\n0,10,2\n1.5,20,3\n"
    mirror = tmp_path / "mirror"
    (mirror / "tiny").mkdir(parents=True)
    (mirror / "tiny" / "t.csv").write_bytes(body)
    ds = Dataset("tiny-trace", "tiny/t.csv", "example/none", "0" * 40, "t.csv",
                 hashlib.sha256(body).hexdigest(), len(body), "CC0", "test file")
    monkeypatch.setitem(DATASETS, ds.name, ds)
    return ds, mirror


def test_fetch_success_then_idempotent(serve, tiny, tmp_path):
    ds, mirror = tiny
    base = serve(mirror)
    dest = tmp_path / "dest"
    r = fetch(ds.name, dest=dest, base_url=base)
    assert r.downloaded and r.path == dest / "tiny" / "t.csv"
    assert r.path.read_bytes() == (mirror / "tiny" / "t.csv").read_bytes()
    again = fetch(ds.name, dest=dest, base_url=base)
    assert not again.downloaded and again.path == r.path
    assert not list(r.path.parent.glob("*.part"))


def test_fetch_env_base_url_and_default_cache(serve, tiny, tmp_path, monkeypatch):
    ds, mirror = tiny
    monkeypatch.setenv("QMODEL_FETCH_BASE_URL", serve(mirror))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    r = fetch(ds.name)
    assert r.path == tmp_path / "cache" / "qmodel" / "data" / "tiny" / "t.csv"
    from qmodel.validation.traces import load_trace

    assert len(load_trace(r.path)) == 2


def test_checksum_mismatch_removes_file(serve, tiny, tmp_path):
    ds, mirror = tiny
    (mirror / "tiny" / "t.csv").write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0,10,2\n")  # tampered
    dest = tmp_path / "dest"
    with pytest.raises(DataError, match="checksum mismatch for tiny-trace.*removed"):
        fetch(ds.name, dest=dest, base_url=serve(mirror))
    assert not (dest / "tiny" / "t.csv").exists()
    assert not list((dest / "tiny").glob("*"))  # no partial file left either


def test_corrupt_existing_copy_is_replaced(serve, tiny, tmp_path):
    ds, mirror = tiny
    dest = tmp_path / "dest"
    (dest / "tiny").mkdir(parents=True)
    (dest / "tiny" / "t.csv").write_bytes(b"garbage")
    r = fetch(ds.name, dest=dest, base_url=serve(mirror))
    assert r.downloaded and fetch_mod.sha256_file(r.path) == ds.sha256


def test_http_404_is_data_error(serve, tiny, tmp_path):
    ds, _ = tiny
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="HTTP 404"):
        fetch(ds.name, dest=tmp_path / "d", base_url=serve(empty))


def test_unknown_name_suggests():
    with pytest.raises(CatalogError) as ei:
        fetch("azure-conv")
    assert "azure-conv-2023" in ei.value.suggestions
    assert ei.value.exit_code == 2


def test_bad_base_url_scheme(tiny):
    with pytest.raises(InputError, match="base-url"):
        url_for(tiny[0], "ftp://example")


def test_upstream_urls_are_pinned_raw_github():
    for ds in DATASETS.values():
        assert ds.upstream_url.startswith("https://raw.githubusercontent.com/")
        assert len(ds.commit) == 40 and ds.commit in ds.upstream_url
        assert len(ds.sha256) == 64


def test_real_file_from_shared_data_over_http(serve, data_dir, tmp_path):
    ds = DATASETS["azure-code-2023"]
    if not (data_dir / ds.rel_path).exists():
        pytest.skip("azure code trace not in the data folder")
    r = fetch(ds.name, dest=tmp_path / "d", base_url=serve(data_dir))
    assert r.downloaded and r.size_bytes == ds.size_bytes


def test_cli_fetch_and_list(serve, tiny, tmp_path, capsys):
    ds, mirror = tiny
    base = serve(mirror)
    assert main(["trace", "fetch", ds.name, "--dest", str(tmp_path / "d"), "--base-url", base]) == 0
    assert "tiny-trace: fetched" in capsys.readouterr().out
    assert main(["trace", "fetch", ds.name, "--dest", str(tmp_path / "d"), "--base-url", base]) == 0
    assert "already present" in capsys.readouterr().out
    assert main(["trace", "fetch", "--list"]) == 0
    assert "mooncake-conv" in capsys.readouterr().out
    assert main(["trace", "fetch", "nope-trace"]) == 2
    assert "unknown trace" in capsys.readouterr().err
    assert main(["trace", "fetch"]) == 2


def _closed_port_url() -> str:
    import socket
    with socket.socket() as s:  # bind, note the port, close: nothing listens there now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_unreachable_server_is_a_network_error_with_what_to_do(tiny, tmp_path, capsys):
    """Offline is not bad input: exit code 5 (not 2), and the one line names the URL to fetch by hand,
    the path to place it at and --base-url."""
    from qmodel.errors import NetworkError

    ds, _ = tiny
    base = _closed_port_url()
    with pytest.raises(NetworkError) as ei:
        fetch(ds.name, dest=tmp_path / "d", base_url=base)
    msg = str(ei.value)
    assert msg.startswith("cannot reach 127.0.0.1:") and "--base-url" in msg
    assert str(tmp_path / "d" / ds.rel_path) in msg and f"{base}/{ds.rel_path}" in msg
    assert not (tmp_path / "d" / ds.rel_path).exists()
    assert main(["trace", "fetch", ds.name, "--dest", str(tmp_path / "d"), "--base-url", base]) == 5
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot reach" in err
