"""`team scheduler` / `team server`: addresses, the TOMLs sccache-dist reads, secrets kept off
the command line, the systemd unit; doctor's checks of both ends.  No process is started:
sccache-dist's `auth` calls and the foreground run are stood in for."""

from __future__ import annotations

import stat
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from sparkbuild.errors import CommandFailed, UsageError
from sparkbuild.proc import ProcResult
from sparkbuild.team import dist_checks, dist_services
from sparkbuild.team.dist_services import (
    TeamService,
    parse_listen,
    run_scheduler,
    run_server,
    scheduler_toml,
    server_toml,
    systemd_unit,
)


def test_listen_is_an_ip_and_a_port(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_listen("192.168.1.10:10600", server=False) == ("192.168.1.10", 10600)
    assert parse_listen("[fe80::1]:10501", server=True) == ("fe80::1", 10501)
    for bad in ("sched.lan:10600", "10600", "1.2.3.4:0", "1.2.3.4:x", "1.2.3.4"):
        with pytest.raises(UsageError):
            parse_listen(bad, server=False)
    assert parse_listen("0.0.0.0:10600", server=False) == ("0.0.0.0", 10600)
    assert "binds every interface" in capsys.readouterr().err
    with pytest.raises(UsageError, match="its address is its identity"):
        parse_listen("0.0.0.0:10501", server=True)


@pytest.mark.parametrize("spelling", ["0.0.0.0", "[::]", "[0:0:0:0:0:0:0:0]", "[::ffff:0.0.0.0]",
                                      "[::ffff:0:0]", "[0:0:0:0:0:ffff:0.0.0.0]",
                                      "[::FFFF:0.0.0.0]", "[::0.0.0.0]"])
def test_every_spelling_of_every_address_is_warned_about_or_refused(
        spelling: str, capsys: pytest.CaptureFixture[str]) -> None:
    host, port = parse_listen(f"{spelling}:10600", server=False)
    assert port == 10600 and host in ("0.0.0.0", "::")
    assert "binds every interface" in capsys.readouterr().err
    with pytest.raises(UsageError, match="cannot listen on every address"):
        parse_listen(f"{spelling}:10501", server=True)


def test_a_mapped_address_is_the_ipv4_address_it_binds() -> None:
    assert parse_listen("[::ffff:192.168.1.10]:10600", server=True) == ("192.168.1.10", 10600)
    assert parse_listen("[::ffff:c0a8:10a]:10600", server=True) == ("192.168.1.10", 10600)
    for bad in ("1.2.3.4:+10600", "1.2.3.4:1_0600", "[::1]: 10600", "[1.2.3.4]]:1"):
        with pytest.raises(UsageError):
            parse_listen(bad, server=False)


def test_the_tomls_are_what_sccache_dist_reads() -> None:
    sched = tomllib.loads(scheduler_toml("10.0.0.1:10600", "tok", "key"))
    assert sched == {"public_addr": "10.0.0.1:10600",
                     "client_auth": {"type": "token", "token": "tok"},
                     "server_auth": {"type": "jwt_hs256", "secret_key": "key"}}
    server = tomllib.loads(server_toml(listen="10.0.0.2:10501", scheduler="http://10.0.0.1:10600/",
                                       cache_dir=Path("/srv/t"), jwt="j.w.t",
                                       bwrap="/usr/bin/bwrap"))
    assert server["public_addr"] == server["bind_address"] == "10.0.0.2:10501"
    assert server["scheduler_url"] == "http://10.0.0.1:10600"
    assert server["builder"] == {"type": "overlay", "build_dir": "/srv/t/overlay",
                                 "bwrap_path": "/usr/bin/bwrap"}
    assert server["cache_dir"] == "/srv/t/toolchains"
    assert server["scheduler_auth"] == {"type": "jwt_token", "token": "j.w.t"}


class FakeDist:
    """Stands in for proc.run: `sccache-dist auth ...` prints a secret; the foreground run
    records its command line and environment."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, cmd: list[Any], **kwargs: Any) -> ProcResult:
        argv = [str(c) for c in cmd]
        self.calls.append((argv, dict(kwargs.get("env") or {})))
        said = {"generate-shared-token": "client-tok", "generate-jwt-hs256-key": "jwt-key",
                "generate-jwt-hs256-server-token": "a.b.c"}
        word = next((said[w] for w in argv if w in said), "")
        return ProcResult(0, word + "\n", None, 0.0)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeDist:
    runner = FakeDist()
    monkeypatch.setattr(dist_services, "run", runner)
    binary = tmp_path / "bin" / "sccache-dist"
    binary.parent.mkdir()
    binary.write_text("")
    monkeypatch.setattr(dist_services, "find_sccache_dist", lambda: binary)
    return runner


def test_the_scheduler_makes_its_secrets_private_and_keeps_them_off_argv(
        fake: FakeDist, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCCACHE_LOG", raising=False)
    service = run_scheduler(listen="127.0.0.1:10600", client_token_file=tmp_path / "c.token",
                            server_key_file=tmp_path / "s.key", state_dir=tmp_path / "state")
    for path in (tmp_path / "c.token", tmp_path / "s.key", service.config):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    data = tomllib.loads(service.config.read_text())
    assert data["client_auth"]["token"] == "client-tok"
    assert data["server_auth"]["secret_key"] == "jwt-key"
    argv, env = fake.calls[-1]
    assert argv[-3:] == ["scheduler", "--config", str(service.config)]
    assert env == {"SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "warn"}
    assert not any("client-tok" in a or "jwt-key" in a for call in fake.calls for a in call[0])
    assert service.returncode == 0 and service.error is None
    again = run_scheduler(listen="127.0.0.1:10600", client_token_file=tmp_path / "c.token",
                          server_key_file=tmp_path / "s.key", state_dir=tmp_path / "state")
    assert again.generated == [] and len(fake.calls) == 4  # 2 auth + run, then run alone


def test_the_scheduler_token_from_the_environment(fake: FakeDist, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKBUILD_DIST_TOKEN", "env-tok")
    service = run_scheduler(listen="127.0.0.1:10600", client_token_file=None,
                            server_key_file=tmp_path / "s.key", state_dir=tmp_path / "st")
    assert tomllib.loads(service.config.read_text())["client_auth"]["token"] == "env-tok"
    monkeypatch.delenv("SPARKBUILD_DIST_TOKEN")
    with pytest.raises(UsageError, match="client token"):
        run_scheduler(listen="127.0.0.1:10600", client_token_file=None,
                      server_key_file=tmp_path / "s.key", state_dir=tmp_path / "st")


@pytest.mark.parametrize("secret", [b"QZX-one\nQZX-two\n", b"QZX one", b"QZX\x1b[0m"])
def test_the_schedulers_secrets_are_checked_before_anything_runs(
        fake: FakeDist, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret: bytes) -> None:
    token = tmp_path / "c.token"
    token.write_bytes(secret)
    token.chmod(0o600)
    with pytest.raises(UsageError, match="the client token file holds") as refused:
        run_scheduler(listen="127.0.0.1:10600", client_token_file=token,
                      server_key_file=tmp_path / "s.key", state_dir=tmp_path / "state")
    assert refused.value.where == str(token) and "QZX" not in refused.value.render()
    monkeypatch.setenv("SPARKBUILD_DIST_TOKEN", secret.decode())
    with pytest.raises(UsageError, match="SPARKBUILD_DIST_TOKEN holds"):
        run_scheduler(listen="127.0.0.1:10600", client_token_file=None,
                      server_key_file=tmp_path / "s.key", state_dir=tmp_path / "state")
    key = tmp_path / "s.key"
    key.write_bytes(secret)
    monkeypatch.setenv("SPARKBUILD_DIST_TOKEN", "env-tok")
    with pytest.raises(UsageError, match="the server key file holds"):
        run_scheduler(listen="127.0.0.1:10600", client_token_file=None,
                      server_key_file=key, state_dir=tmp_path / "state")
    assert not any(argv[-3:-1] == ["scheduler", "--config"] for argv, _ in fake.calls)


def test_a_server_gets_its_jwt_from_the_key_in_a_file(
        fake: FakeDist, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    key = tmp_path / "s.key"
    key.write_text("jwt-key\n")
    key.chmod(0o600)
    service = run_server(scheduler="http://127.0.0.1:10600", listen="127.0.0.1:10501",
                         server_key_file=key, cache_dir=tmp_path / "cache", cpus=2)
    token_call = next(argv for argv, _ in fake.calls if "generate-jwt-hs256-server-token" in argv)
    assert token_call[token_call.index("--server") + 1] == "127.0.0.1:10501"
    assert "jwt-key" not in token_call  # the key is read from a TOML (--config)
    assert not (tmp_path / "cache" / "jwt-key.toml").exists()  # and that TOML removed
    data = tomllib.loads(service.config.read_text())
    assert data["scheduler_auth"]["token"] == "a.b.c"
    assert fake.calls[-1][0][:3] == ["taskset", "--cpu-list", "0-1"]


def test_a_server_needs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(UsageError, match="needs root"):
        run_server(scheduler="http://127.0.0.1:10600", listen="127.0.0.1:10501",
                   server_key_file=tmp_path / "k", cache_dir=tmp_path / "c")


def test_the_systemd_unit_runs_sparkbuild_and_carries_no_secret(tmp_path: Path) -> None:
    service = run_scheduler(listen="10.0.0.1:10600", client_token_file=tmp_path / "c.token",
                            server_key_file=tmp_path / "s.key", state_dir=tmp_path / "st",
                            systemd=True)
    assert service.unit is not None and not (tmp_path / "c.token").exists()
    exec_line = next(line for line in service.unit.splitlines() if line.startswith("ExecStart="))
    assert exec_line.startswith(f"ExecStart={sys.executable} -m sparkbuild team scheduler")
    assert "--client-token-file" in exec_line and "--systemd" not in exec_line
    with pytest.raises(UsageError, match="must not carry the token"):
        run_scheduler(listen="10.0.0.1:10600", client_token_file=None,
                      server_key_file=tmp_path / "s.key", state_dir=tmp_path, systemd=True)
    unit = systemd_unit("x", ["a", "b c"], root=True)
    assert "ExecStart=a 'b c'" in unit and "needs root" in unit


def test_a_service_that_exits_with_an_error_is_one() -> None:
    service = TeamService("server", "1.2.3.4:1", Path("/x"), ["sccache-dist"], returncode=2)
    assert isinstance(service.error, CommandFailed)


def test_server_checks_name_what_is_missing(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setattr("shutil.which", lambda name: None)
    report = dist_checks.server_checks("http://127.0.0.1:9", tmp_path / "cache")
    checks = {c.name: c for c in report.checks}
    assert not checks["root"].ok and not checks["bubblewrap"].ok
    assert checks["server cache directory"].ok or "GiB" in checks["server cache directory"].reason
    assert not checks["scheduler reached"].ok and report.error is not None
