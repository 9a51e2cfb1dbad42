"""Run code from a trusted checkpoint in a child process, under a time and a memory limit.

A TorchScript archive or a full pickle is a program. Once its author is trusted (the per-file
opt-in), the library still runs it at arm's length: in a child process that answers requests
(load the file, one forward pass per batch) and is killed when one request takes longer than
the time limit, so a model that loops forever ends with a clear error instead of hanging an
evaluation, and a crash of the model cannot take the caller down.

What the child contains (Linux):

- It starts a new session (``setsid``) and becomes a *child subreaper*
  (``PR_SET_CHILD_SUBREAPER``), so every process the model's code starts — including one that
  double-forks and leaves the session with its own ``setsid`` — stays below it in the process
  tree. When the child is stopped (time limit, end of the work, an error), its whole tree is
  frozen (``SIGSTOP``) and killed (``SIGKILL``), together with its process group.
- Its address space is capped (``RLIMIT_AS``, :data:`DEFAULT_MEMORY_LIMIT`) while the model
  runs on the CPU, so an allocation bomb ends in a ``MemoryError`` reported as an error.

What it does **not** contain: it is not a sandbox. The code runs as your user, can read and
write your files and use the network while it runs; a process it hands to another service
(``systemd-run``, ``at``, ``ssh``, a container runtime) is outside its tree and survives.

The child is forked from a ``forkserver`` (``spawn`` where there is none) that has imported
torch once, so each worker starts in a fraction of a second after the first.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from sde_core import errors
from sde_core.common.validation import check_int, check_number
from sde_core.errors import ActivationError, SDEError

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_TIME_LIMIT",
    "STARTUP_ALLOWANCE",
    "IsolatedWorker",
    "check_memory_limit",
    "check_time_limit",
    "kill_tree",
    "process_tree",
]

#: Default limit, in seconds, on each step a trusted model runs: loading it, or one forward
#: pass over a batch. Ten minutes is far more than a batch of any supported model takes on a
#: CPU; a model that loops forever is stopped after it.
DEFAULT_TIME_LIMIT = 600.0
#: Seconds allowed for the child process to start (importing torch), before the limit applies.
STARTUP_ALLOWANCE = 120.0
#: Default cap, in bytes, on the address space of the child running a trusted model on the CPU
#: (16 GiB: far above any supported model, far below what takes a workstation down).
DEFAULT_MEMORY_LIMIT = 16 * 2**30
_PR_SET_CHILD_SUBREAPER = 36

Handler = Callable[[tuple[Any, ...]], Any]


def check_time_limit(value: object) -> float:
    """A time limit in seconds: ``None`` means :data:`DEFAULT_TIME_LIMIT`.

    Raises:
        ActivationError: not a positive finite number.
    """
    if value is None:
        return DEFAULT_TIME_LIMIT
    return check_number(value, "time_limit (seconds)", gt=0.0, error=ActivationError)


def check_memory_limit(value: object) -> int | None:
    """A memory limit in bytes (at least 1 GiB: the child imports torch); ``None`` means no
    limit (needed on a GPU, whose driver reserves far more address space than it uses).

    Raises:
        ActivationError: not a whole number of bytes ≥ 1 GiB.
    """
    if value is None:
        return None
    return check_int(value, "memory_limit (bytes)", minimum=2**30, error=ActivationError)


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it (Linux ``/proc``; only ``[root]`` elsewhere)."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return [root]
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue  # ended meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            parents.setdefault(int(fields[1]), []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.append(pid)
            todo.extend(parents.get(pid, []))
    return tree


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_tree(root: int) -> None:
    """Freeze and kill ``root``, every process below it and its process group.

    Processes are stopped first (``SIGSTOP``) and the tree is walked again until no new process
    appears, so a process that forks while the tree is walked cannot escape; then all are
    killed. The child made itself a subreaper, so orphans of double forks are still below it.
    """
    seen: list[int] = []
    for _ in range(50):
        found = [pid for pid in process_tree(root) if pid not in seen]
        if not found:
            break
        _signal_all(found, signal.SIGSTOP)
        seen.extend(found)
    _signal_all(seen, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signal.SIGKILL)


def _contain(memory_limit: int | None) -> None:
    """Child side: own session, subreaper for every descendant, capped address space."""
    with contextlib.suppress(OSError):
        os.setsid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if memory_limit is not None:
        import resource

        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))


def _context() -> Any:
    if "forkserver" in mp.get_all_start_methods():
        return mp.get_context("forkserver")
    return mp.get_context("spawn")  # pragma: no cover - platforms without fork


def _error_reply(exc: BaseException) -> tuple[str, str, str]:
    """The child's report of an exception; running out of memory is named as such even when
    a loader wrapped it in its own error."""
    if isinstance(exc.__cause__, MemoryError):
        exc = exc.__cause__
    return ("error", type(exc).__name__, str(exc))


def _child_main(
    conn: Connection,
    setup: Callable[..., Handler],
    args: tuple[Any, ...],
    memory_limit: int | None = None,
) -> None:
    """Child process: contain itself, build the handler with ``setup(*args)``, then answer
    requests."""
    _contain(memory_limit)
    conn.send(("ready",))
    try:
        handler = setup(*args)
    except BaseException as exc:  # report everything: the parent decides what it means
        conn.send(_error_reply(exc))
        return
    conn.send(("ok", None))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] == "stop":
            return
        try:
            conn.send(("ok", handler(message)))
        except BaseException as exc:
            conn.send(_error_reply(exc))


class IsolatedWorker:
    """A child process running ``setup(*args)`` and then answering :meth:`request` calls.

    Args:
        setup: a module-level function (it is sent to the child by name) that prepares the
            work, e.g. loads a trusted checkpoint, and returns a handler for requests.
        args: picklable arguments of ``setup``.
        time_limit: seconds allowed for ``setup`` and for each request.
        memory_limit: address-space cap of the child in bytes (``None``: none; see
            :func:`check_memory_limit`).
        label: what runs, for messages (e.g. ``"the model in models/h.pt"``).

    Raises:
        ActivationError: the child could not start, or ``setup`` exceeded the limit.
        SDEError: ``setup`` raised an :class:`~sde_core.errors.SDEError` (re-raised by type).
    """

    def __init__(
        self,
        setup: Callable[..., Handler],
        args: tuple[Any, ...],
        *,
        time_limit: float | None = None,
        memory_limit: int | None = None,
        label: str = "the model",
    ) -> None:
        self.time_limit = check_time_limit(time_limit)
        limit = self.memory_limit = check_memory_limit(memory_limit)
        self.label = label
        ctx = _context()
        if ctx.get_start_method() == "forkserver":
            ctx.set_forkserver_preload(["torch", setup.__module__])
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=_child_main, args=(child, setup, args, limit), daemon=True
        )
        try:
            self._process.start()
        except OSError as exc:
            raise ActivationError(f"cannot start a process to run {label}: {exc}") from exc
        finally:
            child.close()
        try:
            self._receive("starting", max(STARTUP_ALLOWANCE, self.time_limit))
            self._receive("loading", self.time_limit)
        except BaseException:
            self.close()
            raise

    def request(self, message: tuple[Any, ...], what: str) -> Any:
        """Send ``message`` to the handler and return its answer within the time limit.

        Raises:
            ActivationError: no answer within the limit (the child is killed), the child died,
                or the handler failed with a non-SDE exception.
            SDEError: the handler raised an SDE error (re-raised with its type).
        """
        try:
            self._conn.send(message)
        except (OSError, ValueError) as exc:
            self.close()
            raise ActivationError(f"the process running {self.label} is gone ({exc})") from exc
        try:
            return self._receive(what, self.time_limit)
        except BaseException:
            self.close()
            raise

    def _receive(self, what: str, limit: float) -> Any:
        if not self._conn.poll(limit):
            self._kill()
            raise ActivationError(
                f"{self.label} did not finish {what} within {limit:g} s and was stopped: a "
                "trusted model may run at most this long per step. If it is simply slow, "
                "raise the time limit (--time-limit SECONDS, or the dashboard's time limit); if "
                "it never finishes, the file's code loops"
            )
        try:
            reply = self._conn.recv()
        except (EOFError, OSError):
            self._process.join(5)
            raise ActivationError(
                f"the process running {self.label} ended while {what} (exit code "
                f"{self._process.exitcode}); the model's code crashed it. If the model's class "
                "comes from a file: module that runs a script when it is imported (training, "
                'sys.exit(), a main() call), put that part under `if __name__ == "__main__":`'
            ) from None
        if reply[0] == "error":
            _, name, text = reply
            kind = getattr(errors, name, None)
            if isinstance(kind, type) and issubclass(kind, SDEError):
                raise kind(text)
            if name == "MemoryError" and self.memory_limit is not None:
                raise ActivationError(
                    f"{self.label} ran out of its memory limit of "
                    f"{self.memory_limit / 2**30:g} GiB while {what} and was stopped"
                )
            hint = ""
            if name == "SystemExit":  # a script's sys.exit(), e.g. an unguarded file: module
                hint = (
                    ": the code called sys.exit(). If the model's class comes from a file: "
                    "module that runs a script when it is imported, put that part under "
                    '`if __name__ == "__main__":`'
                )
            raise ActivationError(f"{self.label} failed while {what} ({name}: {text}){hint}")
        return reply[1] if len(reply) > 1 else None

    def _kill(self) -> None:
        """Kill the child with every process its code started (see :func:`kill_tree`)."""
        pid = self._process.pid
        if pid is not None and self._process.exitcode is None:
            kill_tree(pid)
        elif pid is not None:  # it ended by itself: what is left of its process group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        self._process.join(10)

    def close(self) -> None:
        """Stop the child and every process its code started, and release the pipe.
        Idempotent."""
        self._kill()
        self._conn.close()

    def __enter__(self) -> IsolatedWorker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
