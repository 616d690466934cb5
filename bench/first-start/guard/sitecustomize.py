"""The first-start proof's network guard (bench/first-start): put on PYTHONPATH, it refuses
every TCP connect and every datagram send to an address that is not the machine's own, and
logs each attempt (and each UDP connect, which sends nothing: vLLM's get_ip() asks the
kernel for a route that way) to $FIRST_START_SOCKET_LOG, one JSON line each."""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket
from pathlib import Path
from typing import Any

_LOG = os.environ.get("FIRST_START_SOCKET_LOG", "/tmp/first-start-sockets.jsonl")
_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex
_sendto = socket.socket.sendto


def _local(address: Any) -> bool:
    if not isinstance(address, tuple) or not address:
        return True  # AF_UNIX paths and the like
    host = str(address[0])
    if host in ("localhost", "", "0.0.0.0", "::"):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _log(kind: str, sock: socket.socket, address: Any) -> None:
    with Path(_LOG).open("a", encoding="utf-8") as log:
        log.write(json.dumps({"kind": kind, "type": int(sock.type), "pid": os.getpid(),
                              "address": repr(address)}) + "\n")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address):
        if self.type == socket.SOCK_DGRAM:
            _log("udp_connect", self, address)  # no packet leaves; allowed
        else:
            _log("tcp_connect", self, address)
            raise OSError(errno.ENETUNREACH, "first-start guard: no network")
    _connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    try:
        _guarded_connect(self, address)
    except OSError as exc:
        return exc.errno or errno.ENETUNREACH
    return 0


def _guarded_sendto(self: socket.socket, data: Any, *args: Any) -> int:
    address = args[-1] if args else None
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address):
        _log("sendto", self, address)
        raise OSError(errno.ENETUNREACH, "first-start guard: no network")
    return int(_sendto(self, data, *args))


socket.socket.connect = _guarded_connect  # type: ignore[method-assign,assignment]
socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign,assignment]
socket.socket.sendto = _guarded_sendto  # type: ignore[method-assign,assignment]
