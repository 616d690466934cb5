"""The one way sparkbuild runs another program.

:func:`run` echoes the command (``+ cmd``) and the environment it changes, enforces a
timeout, copies the output to a log file while feeding each line to an optional progress
callback, and on failure raises :class:`CommandFailed` carrying the tail of the log.

Every child starts through setsid: in a process group of its own, with no controlling
terminal (so ssh or git cannot stop an unattended run to ask for a password).  A Ctrl-C
in the terminal therefore reaches sparkbuild alone, and :func:`run` passes it on: the
child's whole group gets SIGINT, and SIGKILL for whatever of it is still there after
:data:`GRACE_SECONDS`.  A timeout does the same with SIGTERM first.  nvcc's own children
(cicc, ptxas) and ninja's compile jobs are in that group, so a build cut short leaves
nothing running.  (``sparkbuild.cli`` turns SIGTERM into the same interrupt.)
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sparkbuild.console import echo_command
from sparkbuild.errors import CommandFailed, ToolchainError, disk_full_as_error, is_disk_full

TAIL_LINES = 40
OUTPUT_TAIL_LINES = 1000
"""The lines of output a run that logs to a file keeps in memory (the last ones): a build's
whole output lives in its log, not in sparkbuild's memory."""
GRACE_SECONDS = 3.0
"""How long a stopped child's group may take to exit after SIGINT or SIGTERM."""
STOP_POLL_SECONDS = 0.5
"""How often a run's ``stop`` event is looked at."""
_POLL_SECONDS = 0.02


@dataclass(frozen=True)
class ProcResult:
    returncode: int
    output: str
    """What the program printed (stdout and stderr together): all of it without a log; with
    one, its last :data:`OUTPUT_TAIL_LINES` lines (``complete`` says which)."""
    log: Path | None
    seconds: float
    complete: bool = True
    """Whether ``output`` is everything the program printed."""

    def full_output(self) -> str:
        """Everything the program printed: ``output``, or the log it was written to."""
        if self.complete or self.log is None:
            return self.output
        return self.log.read_text(encoding="utf-8", errors="replace")


GroupListener = Callable[[int, bool], None]
_GROUP_LISTENERS: list[GroupListener] = []


def add_group_listener(listener: GroupListener) -> None:
    """Call ``listener(pgid, started)`` as each child's process group starts and ends.

    The cache lock records the groups of its holder (see sparkbuild.store.lock), so that
    the next run can stop what a run killed with SIGKILL left running.
    """
    if listener not in _GROUP_LISTENERS:
        _GROUP_LISTENERS.append(listener)


def _tell_group(pgid: int, started: bool) -> None:
    for listener in list(_GROUP_LISTENERS):
        listener(pgid, started)


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
    # Line-buffered: the log on disk follows the build line by line (block buffering held
    # back 8 KiB, some 60 of ninja's [n/m] lines, which is how the log read in bursts).
    return log.open("w", encoding="utf-8", errors="replace", buffering=1)


def _pump(
    stream: IO[str],
    log_file: IO[str] | None,
    lines: list[str] | deque[str],
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


class _Group:
    """A child started in a process group of its own, and everything it started: stopped as one.

    The leader is waited for without being reaped (``waitid(WNOWAIT)``), so that while
    the group is signalled its id cannot have been given to an unrelated process.
    """

    def __init__(self, child: subprocess.Popen[str]) -> None:
        self.child = child
        self.exited = threading.Event()
        self._reaped = False
        self._guard = threading.Lock()

    def send(self, sig: signal.Signals) -> None:
        with self._guard:
            if not self._reaped:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.child.pid, sig)

    def wait_exit(self, timeout: float | None = None) -> bool:
        """Wait until the leader has exited (a zombie, not reaped); False on timeout."""
        if timeout is None:
            os.waitid(os.P_PID, self.child.pid, os.WEXITED | os.WNOWAIT)
            self.exited.set()
            return True
        deadline = time.monotonic() + timeout
        while os.waitid(os.P_PID, self.child.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_SECONDS)
        self.exited.set()
        return True

    def reap(self) -> int:
        with self._guard:
            returncode = self.child.wait()
            self._reaped = True
        return returncode

    def stop(self, first: signal.Signals) -> None:
        """``first`` to the group, then SIGKILL to what is left of it after the grace."""
        try:
            self.send(first)
            self.wait_exit(GRACE_SECONDS)
        finally:  # a second Ctrl-C during the grace lands here: kill at once
            self.send(signal.SIGKILL)
            self.reap()


@dataclass(frozen=True, kw_only=True)
class Streams:
    """What a run is fed and who watches its output as it comes (:func:`run`)."""

    stdin_data: str | None = None
    """Written to the child's stdin (else it reads nothing)."""
    progress: Callable[[str], None] | None = None
    """Called with each line of output."""
    stop: threading.Event | None = None
    """Once it is set (by a thread watching the output), the group is stopped as at the
    deadline and the run fails."""


NO_STREAMS = Streams()


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    log: Path | None = None,
    check: bool = True,
    echo: bool = True,
    streams: Streams = NO_STREAMS,
) -> ProcResult:
    """Run ``cmd``; ``env`` holds overrides on top of ``os.environ``; ``streams``: its
    stdin and the watchers of its output.

    Raises :class:`ToolchainError` when the program does not exist and
    :class:`CommandFailed` (with the log tail) when it fails or times out and ``check``.
    On Ctrl-C the child's process group is stopped and ``KeyboardInterrupt`` re-raised.
    """
    stdin_data, progress, stop = streams.stdin_data, streams.progress, streams.stop
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
    # with a log, the output is there: only its tail is kept here (a build prints gigabytes)
    lines: list[str] | deque[str] = [] if log is None else deque(maxlen=OUTPUT_TAIL_LINES)
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
            start_new_session=True,
        ) as child:
            group = _Group(child)
            _tell_group(child.pid, True)
            assert child.stdout is not None
            reader = threading.Thread(
                target=_pump, args=(child.stdout, log_file, lines, progress, failure), daemon=True
            )
            # A timer stops the group at the deadline, so that waiting is one blocking call
            # (Popen.wait(timeout=...) polls with sleeps, which adds up over many short runs).
            timed_out = threading.Event()
            timer: threading.Timer | None = None
            try:  # from here on a Ctrl-C stops the group, wherever it lands
                with _stop_signals_blocked():  # the helper threads never take Ctrl-C
                    reader.start()
                    timer = _deadline(group, timeout, timed_out)
                    if stop is not None:
                        _stopper(group, stop)
                if stdin_data is not None:
                    assert child.stdin is not None
                    with contextlib.suppress(BrokenPipeError):
                        child.stdin.write(stdin_data)
                        child.stdin.close()
                group.wait_exit()
                if timed_out.is_set():  # the leader is gone; its children may not be
                    group.send(signal.SIGKILL)
            except BaseException:  # Ctrl-C: pass it on to the group, let the reader drain
                group.stop(signal.SIGINT)
                _tell_group(child.pid, False)
                if reader.is_alive():
                    reader.join(timeout=GRACE_SECONDS)
                if reader.is_alive():  # a process that left the group holds the pipe: closing
                    child.stdout = None  # it under the reader would wait for that process
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            returncode = group.reap()
            _tell_group(child.pid, False)
            reader.join()
            if timed_out.is_set():
                raise _failed(argv, lines, log, f"timed out after {timeout:.0f} s")
            if stop is not None and stop.is_set():
                raise _failed(argv, lines, log, "stopped by its output's watcher")
    finally:
        if log_file is not None:
            _close_log(log_file, failure)
    _raise_log_failure(failure, log)
    result = ProcResult(returncode, "".join(lines), log, time.monotonic() - started,
                        complete=log is None)
    if check and returncode != 0:
        raise _failed(argv, lines, log, f"exited with status {returncode}")
    return result


STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """Threads started inside inherit a mask that blocks Ctrl-C and SIGTERM.

    The kernel hands a process-directed signal to any thread that does not block it.  Had
    the reader thread (blocked in ``read``) taken a Ctrl-C, Python would run the handler in
    the main thread only when that thread next runs bytecode, but it sits in ``waitid`` for
    the child, which the signal did not interrupt: the run would go on until the child
    exits.  With the helpers blocking the signals, the main thread takes them.  A signal
    that arrives while the mask is up waits and is taken when it is lowered.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _deadline(
    group: _Group, timeout: float | None, timed_out: threading.Event
) -> threading.Timer | None:
    """A timer that stops ``group`` after ``timeout`` seconds: SIGTERM, then SIGKILL."""
    if timeout is None:
        return None

    def stop() -> None:
        timed_out.set()
        _stop_group(group)

    timer = threading.Timer(timeout, stop)
    timer.daemon = True
    timer.start()
    return timer


def _stop_group(group: _Group) -> None:
    """SIGTERM, then SIGKILL after the grace period."""
    group.send(signal.SIGTERM)
    if not group.exited.wait(GRACE_SECONDS):
        group.send(signal.SIGKILL)


def _stopper(group: _Group, stop: threading.Event) -> None:
    """A thread that stops ``group`` once ``stop`` is set, and ends when the group does."""

    def watch() -> None:
        while not group.exited.wait(STOP_POLL_SECONDS):
            if stop.is_set():
                _stop_group(group)
                return

    threading.Thread(target=watch, daemon=True, name="sparkbuild-stop").start()


def _close_log(log_file: IO[str], failure: list[BaseException]) -> None:
    try:
        log_file.close()
    except OSError as exc:
        failure.append(exc)


def _raise_log_failure(failure: list[BaseException], log: Path | None) -> None:
    """An error of the reader thread (writing the log), a full disk first."""
    if not failure:
        return
    exc = next((e for e in failure if is_disk_full(e)), failure[0])
    with disk_full_as_error(
        "the disk filled up while writing the log",
        where=str(log),
        hint="free some space (builds need tens of GB) and run again",
    ):
        raise exc


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """Inside the block SIGTERM is a Ctrl-C: :func:`run` stops the child's group, and the
    run ends as interrupted.  (A job killer sends SIGTERM to sparkbuild's process group,
    which the children, each in a process group of its own, are no longer part of.)

    Only in the main thread, and only where SIGTERM still has its default action.
    """
    installed = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    )
    if installed:
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        if installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _failed(argv: list[str], lines: list[str] | deque[str], log: Path | None, why: str
            ) -> CommandFailed:
    tail = "".join(deque(lines, maxlen=TAIL_LINES)).rstrip()
    where = f"full log: {log}" if log is not None else None
    what = f"{Path(argv[0]).name} {why}: {format_command(argv)}"
    if tail:
        what += "\n--- last lines of output ---\n" + tail
    return CommandFailed(what, where=where, hint="read the output above; fix and run again")
