"""The one way sparkbuild runs another program.

:func:`run` echoes the command (``+ cmd``) and the environment it changes, enforces a
timeout, copies the output to a log file while feeding each line to an optional progress
callback, and on failure raises :class:`CommandFailed` carrying the tail of the log.
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sparkbuild.console import echo_command
from sparkbuild.errors import CommandFailed, DiskFullError, ToolchainError

TAIL_LINES = 40


@dataclass(frozen=True)
class ProcResult:
    returncode: int
    output: str
    """Everything the program printed (stdout and stderr together)."""
    log: Path | None
    seconds: float


def format_command(cmd: Sequence[str | os.PathLike[str]]) -> str:
    return " ".join(shlex.quote(os.fspath(part)) for part in cmd)


def command_kind(argv: Sequence[str]) -> str:
    """``git apply`` for ``git apply --check -R``: the program and its subcommand."""
    kind = Path(argv[0]).name
    return f"{kind} {argv[1]}" if len(argv) > 1 and not argv[1].startswith("-") else kind


def env_changes(env: Mapping[str, str] | None) -> dict[str, str]:
    """The entries of ``env`` that differ from the current environment."""
    if not env:
        return {}
    return {key: value for key, value in env.items() if os.environ.get(key) != value}


def _open_log(log: Path | None) -> IO[str] | None:
    if log is None:
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    return log.open("w", encoding="utf-8", errors="replace")


def _pump(
    stream: IO[str],
    log_file: IO[str] | None,
    lines: list[str],
    progress: Callable[[str], None] | None,
    failure: list[BaseException],
) -> None:
    try:
        for line in stream:
            lines.append(line)
            if log_file is not None:
                log_file.write(line)
            if progress is not None:
                progress(line.rstrip("\n"))
    except OSError as exc:  # the log's disk filled up, most likely
        failure.append(exc)
    except ValueError:  # the pipe was closed under us: the run is being torn down
        pass


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    log: Path | None = None,
    progress: Callable[[str], None] | None = None,
    check: bool = True,
    echo: bool = True,
    stdin_data: str | None = None,
) -> ProcResult:
    """Run ``cmd``; ``env`` holds overrides on top of ``os.environ``.

    Raises :class:`ToolchainError` when the program does not exist and
    :class:`CommandFailed` (with the log tail) when it fails or times out and ``check``.
    """
    argv = [os.fspath(part) for part in cmd]
    changes = env_changes(env)
    if echo:
        echo_command(format_command(argv), command_kind(argv), changes)
    if shutil.which(argv[0]) is None and not Path(argv[0]).is_file():
        raise ToolchainError(
            f"program not found: {argv[0]}",
            hint="install it or put it on PATH; `python -m sparkbuild doctor` lists what is needed",
        )
    full_env = {**os.environ, **changes} if changes else None
    lines: list[str] = []
    failure: list[BaseException] = []
    started = time.monotonic()
    log_file = _open_log(log)
    try:
        with subprocess.Popen(
            argv,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as child:
            assert child.stdout is not None
            if stdin_data is not None:
                assert child.stdin is not None
                child.stdin.write(stdin_data)
                child.stdin.close()
            reader = threading.Thread(
                target=_pump, args=(child.stdout, log_file, lines, progress, failure), daemon=True
            )
            reader.start()
            # A timer kills the child at the deadline, so that waiting is one blocking call
            # (Popen.wait(timeout=...) polls with sleeps, which adds up over many short runs).
            timed_out = threading.Event()
            timer = _deadline(child, timeout, timed_out)
            try:
                returncode = child.wait()
            except BaseException:  # Ctrl-C: stop the child, let the reader drain, re-raise
                child.kill()
                child.wait()
                reader.join()
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            reader.join()
            if timed_out.is_set():
                raise _failed(argv, lines, log, f"timed out after {timeout:.0f} s")
    finally:
        if log_file is not None:
            _close_log(log_file, failure)
    _raise_disk_full(failure, log)
    result = ProcResult(returncode, "".join(lines), log, time.monotonic() - started)
    if check and returncode != 0:
        raise _failed(argv, lines, log, f"exited with status {returncode}")
    return result


def _deadline(
    child: subprocess.Popen[str], timeout: float | None, timed_out: threading.Event
) -> threading.Timer | None:
    if timeout is None:
        return None

    def kill() -> None:
        timed_out.set()
        child.kill()

    timer = threading.Timer(timeout, kill)
    timer.daemon = True
    timer.start()
    return timer


def _close_log(log_file: IO[str], failure: list[BaseException]) -> None:
    try:
        log_file.close()
    except OSError as exc:
        failure.append(exc)


def _raise_disk_full(failure: list[BaseException], log: Path | None) -> None:
    for exc in failure:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise DiskFullError(
                "the disk filled up while writing the log",
                where=str(log),
                hint="free some space (builds need tens of GB) and run again",
            ) from exc
    if failure:
        raise failure[0]


def _failed(argv: list[str], lines: list[str], log: Path | None, why: str) -> CommandFailed:
    tail = "".join(deque(lines, maxlen=TAIL_LINES)).rstrip()
    where = f"full log: {log}" if log is not None else None
    what = f"{Path(argv[0]).name} {why}: {format_command(argv)}"
    if tail:
        what += "\n--- last lines of output ---\n" + tail
    return CommandFailed(what, where=where, hint="read the output above; fix and run again")
