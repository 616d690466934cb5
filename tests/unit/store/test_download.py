"""Downloads against a local HTTP server in a thread, and file:// URLs."""

from __future__ import annotations

import errno
import hashlib
import http.server
import io
import threading
from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import (
    CacheMissError,
    DiskFullError,
    HashMismatchError,
    NetworkError,
    VerifyError,
)
from sparkbuild.store.cache import Cache
from sparkbuild.store.download import _stream_to, download, fetch_to_cache

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

BODY = b"0123456789abcdef" * 4096
BODY_SHA = hashlib.sha256(BODY).hexdigest()


class Server:
    """Serves ``routes`` (path -> (status, headers, body)); counts hits per path."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.hits: dict[str, int] = {}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.hits[self.path] = server.hits.get(self.path, 0) + 1
                status, headers, body = server.routes.get(self.path, (404, {}, b"missing"))
                self.send_response(status)
                headers = {"Content-Length": str(len(body)), **headers}
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def add(self, path: str, body: bytes, **headers: str) -> str:
        self.routes[path] = (200, headers, body)
        return self.url + path


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    thread = threading.Thread(target=srv.httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def no_partials(directory: Path) -> bool:
    return not list(directory.rglob(".partial-*"))


def test_hash_mismatch_names_url_expected_and_actual(server: Server, tmp_path: Path) -> None:
    url = server.add("/f.tar.gz", BODY)
    wrong = "ab" * 32
    cache = Cache(tmp_path / "c")
    with pytest.raises(HashMismatchError) as caught:
        fetch_to_cache(cache, url, wrong)
    message = caught.value.what
    assert url in message and wrong in message and BODY_SHA in message
    assert not cache.has(BODY_SHA) and not cache.has(wrong)
    assert no_partials(tmp_path)


def test_http_404_is_a_network_error_with_offline_hint(server: Server, tmp_path: Path) -> None:
    with pytest.raises(NetworkError) as caught:
        fetch_to_cache(Cache(tmp_path / "c"), server.url + "/nope", None)
    assert "404" in caught.value.what
    assert caught.value.where == server.url + "/nope"
    assert "--offline" in (caught.value.hint or "")


def test_unreachable_host_is_a_network_error(server: Server, tmp_path: Path) -> None:
    url = server.url + "/x"
    server.httpd.server_close()  # nothing listens on the port any more
    with pytest.raises(NetworkError):
        fetch_to_cache(Cache(tmp_path / "c"), url, None)


def test_short_body_is_a_network_error(server: Server, tmp_path: Path) -> None:
    url = server.add("/short", BODY[:100], **{"Content-Length": str(len(BODY))})
    cache = Cache(tmp_path / "c")
    with pytest.raises(NetworkError):
        fetch_to_cache(cache, url, None)
    assert cache.lookup("urls", url) is None
    assert no_partials(tmp_path)


def test_a_download_over_its_limit_is_refused_and_nothing_kept(server: Server,
                                                               tmp_path: Path) -> None:
    """Content-Length over the limit: refused before the body is read."""
    url = server.add("/manifest.json", BODY)
    with pytest.raises(VerifyError) as caught:
        download(url, tmp_path / "manifest.json", limit=len(BODY) - 1)
    assert caught.value.where == url
    assert f"over {len(BODY) - 1} bytes" in caught.value.what
    assert not (tmp_path / "manifest.json").exists() and no_partials(tmp_path)
    assert download(url, tmp_path / "manifest.json", limit=len(BODY)).read_bytes() == BODY


def test_a_body_without_length_is_cut_at_the_limit() -> None:
    """No Content-Length (a stream that does not end): refused at the first chunk past it."""
    out = io.BytesIO()
    with pytest.raises(VerifyError):
        _stream_to(io.BytesIO(BODY), out, "http://h/m", "fetching", limit=100)
    assert len(out.getvalue()) <= 100
    assert _stream_to(io.BytesIO(BODY), io.BytesIO(), "http://h/m", "x", limit=len(BODY)) == (
        BODY_SHA)


def test_file_url(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(BODY)
    cache = Cache(tmp_path / "c")
    assert fetch_to_cache(cache, source.as_uri(), BODY_SHA).read_bytes() == BODY
    with pytest.raises(NetworkError):
        fetch_to_cache(cache, (tmp_path / "absent").as_uri(), None)


def test_disk_full_during_download(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = server.add("/f", BODY)
    cache = Cache(tmp_path / "c")

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.fsync", full)
    with pytest.raises(DiskFullError):
        fetch_to_cache(cache, url, BODY_SHA)
    assert no_partials(tmp_path) and not cache.has(BODY_SHA)


def test_fetch_to_cache_reuses_the_entry(server: Server, tmp_path: Path) -> None:
    url = server.add("/f", BODY)
    cache = Cache(tmp_path / "c")
    first = fetch_to_cache(cache, url, BODY_SHA)
    second = fetch_to_cache(cache, url, BODY_SHA)
    assert first == second == cache.blob_path(BODY_SHA)
    assert server.hits["/f"] == 1
    # offline, the verified entry is enough
    assert fetch_to_cache(cache, url, BODY_SHA, offline=True) == first
    assert no_partials(tmp_path)


def test_fetch_without_pin_records_the_hash(server: Server, tmp_path: Path) -> None:
    url = server.add("/f", BODY)
    cache = Cache(tmp_path / "c")
    fetch_to_cache(cache, url, None)
    assert cache.lookup("urls", url) == {"sha256": BODY_SHA, "name": "f"}
    fetch_to_cache(cache, url, None)
    assert server.hits["/f"] == 1


def test_corrupted_entry_is_fetched_again_online(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = server.add("/f", BODY)
    cache = Cache(tmp_path / "c")
    path = fetch_to_cache(cache, url, BODY_SHA)
    path.write_bytes(b"bit rot")
    again = fetch_to_cache(cache, url, BODY_SHA)
    assert again.read_bytes() == BODY
    assert server.hits["/f"] == 2
    assert "corrupted" in capsys.readouterr().err


def test_corrupted_entry_is_reported_offline(server: Server, tmp_path: Path) -> None:
    url = server.add("/f", BODY)
    cache = Cache(tmp_path / "c")
    fetch_to_cache(cache, url, BODY_SHA).write_bytes(b"bit rot")
    with pytest.raises(CacheMissError) as caught:
        fetch_to_cache(cache, url, BODY_SHA, offline=True)
    assert "corrupted" in caught.value.what
    assert server.hits["/f"] == 1


def test_missing_entry_offline_never_touches_the_network(server: Server, tmp_path: Path) -> None:
    url = server.add("/f", BODY)
    with pytest.raises(CacheMissError) as caught:
        fetch_to_cache(Cache(tmp_path / "c"), url, BODY_SHA, offline=True)
    assert url in caught.value.what
    assert server.hits == {}


def test_fetch_to_cache_hash_mismatch_keeps_nothing(server: Server, tmp_path: Path) -> None:
    url = server.add("/f", BODY)
    cache = Cache(tmp_path / "c")
    with pytest.raises(HashMismatchError):
        fetch_to_cache(cache, url, "cd" * 32)
    assert not cache.has(BODY_SHA) and not cache.has("cd" * 32)
    assert no_partials(tmp_path)
