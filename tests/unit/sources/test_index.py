"""The index client: pip's config, PEP 691 JSON and PEP 503 HTML pages, file choice."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparkbuild.errors import CacheMissError, HashMismatchError, NetworkError, SourceError
from sparkbuild.sources import index as index_client
from sparkbuild.sources.index import IndexFile, choose_file, find_file, normalize
from sparkbuild.store.cache import Cache

if TYPE_CHECKING:
    from collections.abc import Iterator

SDIST = b"not really a tarball, only bytes to hash"
SDIST_SHA = hashlib.sha256(SDIST).hexdigest()
HEX_A = "a" * 64

HTML_PAGE = f"""<!DOCTYPE html><html><body>
<h1>Links for foo-bar</h1>
<a href="../../files/foo_bar-1.0.tar.gz#sha256={HEX_A}">foo_bar-1.0.tar.gz</a><br>
<a href="https://files.example/foo_bar-1.0-py3-none-any.whl#md5=abc">foo_bar-1.0-py3-none-any.whl</a>
<a href="/abs/foo-bar-2.0.zip#sha256={"B" * 64}" data-yanked="">foo-bar-2.0.zip</a>
</body></html>
"""


def json_page(url: str, sha: str | None = SDIST_SHA) -> str:
    files: list[dict[str, object]] = [
        {
            "filename": "foo_bar-1.0.tar.gz",
            "url": url,
            "hashes": {"sha256": sha} if sha else {},
            "size": len(SDIST),
        },
        {"filename": "foo_bar-1.0-cp312-cp312-linux_aarch64.whl", "url": "w1", "hashes": {}},
        {"filename": "foo_bar-1.0-cp311-cp311-linux_aarch64.whl", "url": "w2", "hashes": {}},
    ]
    return json.dumps({"meta": {"api-version": "1.0"}, "name": "foo-bar", "files": files})


# -- configuration -----------------------------------------------------------------------


@pytest.fixture
def no_pip_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONFIG_FILE"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.usefixtures("no_pip_env")
def test_index_url_from_config_files_later_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, third = tmp_path / "a.conf", tmp_path / "b.conf", tmp_path / "c.conf"
    first.write_text("[global]\nindex-url = https://first.example/simple\n")
    second.write_text(
        "[global]\nindex_url = https://second.example/simple\n"
        "extra-index-url = file:///x/simple\n  file:///y/simple\n"
    )
    third.write_text("[install]\nindex-url = https://not-global.example/simple\n")
    monkeypatch.setattr(
        index_client, "config_files", lambda: [first, second, third, tmp_path / "no"]
    )
    assert index_client.index_url() == "https://second.example/simple"
    assert index_client.extra_index_urls() == ["file:///x/simple", "file:///y/simple"]
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.example/simple")
    assert index_client.index_url() == "https://env.example/simple"


@pytest.mark.usefixtures("no_pip_env")
def test_index_url_default_is_pypi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_client, "config_files", lambda: [tmp_path / "absent.conf"])
    assert index_client.index_url() == "https://pypi.org/simple"
    assert index_client.extra_index_urls() == []


def test_config_files_include_the_venv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "extra.conf"))
    files = index_client.config_files()
    assert Path("/etc/pip.conf") in files and Path("/etc/xdg/pip/pip.conf") in files
    assert files[-2:] == [tmp_path / "pip.conf", tmp_path / "extra.conf"]


# -- parsing ----------------------------------------------------------------------------


def test_normalize_per_pep_503() -> None:
    assert normalize("Foo__Bar.baz-Qux") == "foo-bar-baz-qux"


def test_parse_html_page_resolves_links_and_fragments() -> None:
    files = index_client.parse_html_page(HTML_PAGE, "https://idx.example/simple/foo-bar/")
    assert files == [
        IndexFile("foo_bar-1.0.tar.gz", "https://idx.example/files/foo_bar-1.0.tar.gz", HEX_A),
        IndexFile(
            "foo_bar-1.0-py3-none-any.whl",
            "https://files.example/foo_bar-1.0-py3-none-any.whl",
            None,
        ),
        IndexFile("foo-bar-2.0.zip", "https://idx.example/abs/foo-bar-2.0.zip", "b" * 64),
    ]


def test_parse_json_page() -> None:
    files = index_client.parse_json_page(json_page("../../f/foo_bar-1.0.tar.gz"), "https://i.example/s/x/")
    assert files[0] == IndexFile(
        "foo_bar-1.0.tar.gz", "https://i.example/f/foo_bar-1.0.tar.gz", SDIST_SHA, len(SDIST)
    )
    assert files[1].sha256 is None


def test_parse_json_page_rejects_garbage() -> None:
    with pytest.raises(NetworkError):
        index_client.parse_json_page("<html>", "https://i.example/")
    with pytest.raises(NetworkError):
        index_client.parse_json_page('{"files": 3}', "https://i.example/")


def test_choose_file() -> None:
    files = index_client.parse_json_page(json_page("f.tar.gz"), "https://i.example/s/foo-bar/")
    assert choose_file(files, "Foo.Bar", "1.0.0", kind="sdist", filename=None) == files[0]
    assert choose_file(files, "foo-bar", "1.1", kind="sdist", filename=None) is None
    named = "foo_bar-1.0-cp311-cp311-linux_aarch64.whl"
    assert choose_file(files, "x", "0", kind="wheel", filename=named) == files[2]
    with pytest.raises(SourceError) as caught:
        choose_file(files, "foo-bar", "1.0", kind="wheel", filename=None)
    assert named in (caught.value.hint or "")
    pure = [*files, IndexFile("foo_bar-1.0-py3-none-any.whl", "u", None)]
    assert choose_file(pure, "foo-bar", "1.0", kind="wheel", filename=None) == pure[-1]


# -- against an index -------------------------------------------------------------------


class Index:
    """A one-project index on 127.0.0.1: JSON when asked for it, else HTML."""

    def __init__(self, *, json_api: bool = True, sha: str | None = SDIST_SHA) -> None:
        self.hits: list[str] = []
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                index.hits.append(self.path)
                if self.path == "/simple/foo-bar/":
                    wants_json = index_client.JSON_TYPE in self.headers.get("Accept", "")
                    if json_api and wants_json:
                        page = json_page("/files/foo_bar-1.0.tar.gz", sha)
                        body, kind = page, index_client.JSON_TYPE
                    else:
                        body, kind = HTML_PAGE.replace(HEX_A, sha or "x"), "text/html"
                    self._send(200, body.encode(), kind)
                elif self.path == "/files/foo_bar-1.0.tar.gz":
                    self._send(200, SDIST, "application/octet-stream")
                else:
                    self._send(404, b"no", "text/plain")

            def _send(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/simple"

    def __enter__(self) -> Index:
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def only_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setattr(index_client, "extra_index_urls", list)
    yield


@pytest.mark.usefixtures("only_index")
@pytest.mark.parametrize("json_api", [True, False])
def test_find_file_json_or_html(json_api: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    with Index(json_api=json_api) as index:
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        found = find_file("Foo_Bar", "1.0")
    assert found.filename == "foo_bar-1.0.tar.gz"
    assert found.url == index.url.replace("/simple", "/files/foo_bar-1.0.tar.gz")
    assert found.sha256 == SDIST_SHA
    assert index.hits == ["/simple/foo-bar/"]


@pytest.mark.usefixtures("only_index")
def test_unknown_project_and_version(monkeypatch: pytest.MonkeyPatch) -> None:
    with Index() as index:
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        with pytest.raises(SourceError, match=r"no sdist of foo-bar 9\.9"):
            find_file("foo-bar", "9.9")
        with pytest.raises(SourceError, match="no sdist of nothing_here 1"):
            find_file("nothing_here", "1")


@pytest.mark.usefixtures("only_index")
def test_unreachable_index(monkeypatch: pytest.MonkeyPatch) -> None:
    index = Index()
    index.httpd.server_close()
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    with pytest.raises(NetworkError):
        find_file("foo-bar", "1.0")


def test_file_index_falls_through_to_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    (full / "foo-bar").mkdir(parents=True)
    (full / "foo-bar" / "index.html").write_text(HTML_PAGE)
    monkeypatch.setenv("PIP_INDEX_URL", empty.as_uri())
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", full.as_uri())
    found = find_file("foo-bar", "1.0")
    assert found.url == (tmp_path / "files" / "foo_bar-1.0.tar.gz").as_uri()
    assert found.sha256 == HEX_A


@pytest.mark.usefixtures("only_index")
def test_fetch_sdist_checks_the_index_hash_and_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = Cache(tmp_path / "c")
    with Index() as index:
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        path = index_client.fetch_sdist(cache, "foo-bar", "1.0")
        assert path.read_bytes() == SDIST
        assert index_client.fetch_sdist(cache, "Foo_Bar", "1.0") == path
    assert index.hits.count("/files/foo_bar-1.0.tar.gz") == 1
    # the server is gone: offline the cached sdist is still there
    assert index_client.fetch_sdist(cache, "foo-bar", "1.0", offline=True) == path
    with pytest.raises(CacheMissError):
        index_client.fetch_sdist(cache, "foo-bar", "2.0", offline=True)


@pytest.mark.usefixtures("only_index")
def test_fetch_sdist_hash_mismatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path / "c")
    with Index(sha="c" * 64) as index:
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        with pytest.raises(HashMismatchError, match="c" * 64):
            index_client.fetch_sdist(cache, "foo-bar", "1.0")
    assert not cache.has(SDIST_SHA)
    assert cache.lookup("sdists", "foo-bar==1.0") is None


def test_devnull_config_file_means_no_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    assert index_client.config_files() == []
