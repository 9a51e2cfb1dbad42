"""Run code from a trusted checkpoint in a child process, under a time limit.

A TorchScript archive or a full pickle is a program. Once its author is trusted (the per-file
opt-in), the library still runs it at arm's length: in a child process that answers requests
(load the file, one forward pass per batch) and is killed when one request takes longer than
the time limit, so a model that loops forever ends with a clear error instead of hanging an
evaluation, and a crash of the model cannot take the caller down.

The child is forked from a ``forkserver`` (``spawn`` where there is none) that has imported
torch once, so each worker starts in a fraction of a second after the first.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from sde_core import errors
from sde_core.common.validation import check_number
from sde_core.errors import ActivationError, SDEError

__all__ = ["DEFAULT_TIME_LIMIT", "STARTUP_ALLOWANCE", "IsolatedWorker", "check_time_limit"]

#: Default limit, in seconds, on each step a trusted model runs: loading it, or one forward
#: pass over a batch. Ten minutes is far more than a batch of any supported model takes on a
#: CPU; a model that loops forever is stopped after it.
DEFAULT_TIME_LIMIT = 600.0
#: Seconds allowed for the child process to start (importing torch), before the limit applies.
STARTUP_ALLOWANCE = 120.0

Handler = Callable[[tuple[Any, ...]], Any]


def check_time_limit(value: object) -> float:
    """A time limit in seconds: ``None`` means :data:`DEFAULT_TIME_LIMIT`.

    Raises:
        ActivationError: not a positive finite number.
    """
    if value is None:
        return DEFAULT_TIME_LIMIT
    return check_number(value, "time_limit (seconds)", gt=0.0, error=ActivationError)


def _context() -> Any:
    if "forkserver" in mp.get_all_start_methods():
        return mp.get_context("forkserver")
    return mp.get_context("spawn")  # pragma: no cover - platforms without fork


def _child_main(conn: Connection, setup: Callable[..., Handler], args: tuple[Any, ...]) -> None:
    """Child process: build the handler with ``setup(*args)``, then answer requests."""
    conn.send(("ready",))
    try:
        handler = setup(*args)
    except BaseException as exc:  # report everything: the parent decides what it means
        conn.send(("error", type(exc).__name__, str(exc)))
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
            conn.send(("error", type(exc).__name__, str(exc)))


class IsolatedWorker:
    """A child process running ``setup(*args)`` and then answering :meth:`request` calls.

    Args:
        setup: a module-level function (it is sent to the child by name) that prepares the
            work, e.g. loads a trusted checkpoint, and returns a handler for requests.
        args: picklable arguments of ``setup``.
        time_limit: seconds allowed for ``setup`` and for each request.
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
        label: str = "the model",
    ) -> None:
        self.time_limit = check_time_limit(time_limit)
        self.label = label
        ctx = _context()
        if ctx.get_start_method() == "forkserver":
            ctx.set_forkserver_preload(["torch", setup.__module__])
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_child_main, args=(child, setup, args), daemon=True)
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
                "raise the time limit; if it never finishes, the file's code loops"
            )
        try:
            reply = self._conn.recv()
        except (EOFError, OSError):
            self._process.join(5)
            raise ActivationError(
                f"the process running {self.label} ended while {what} (exit code "
                f"{self._process.exitcode}); the model's code crashed it"
            ) from None
        if reply[0] == "error":
            _, name, text = reply
            kind = getattr(errors, name, None)
            if isinstance(kind, type) and issubclass(kind, SDEError):
                raise kind(text)
            raise ActivationError(f"{self.label} failed while {what} ({name}: {text})")
        return reply[1] if len(reply) > 1 else None

    def _kill(self) -> None:
        if self._process.is_alive():
            self._process.kill()
        self._process.join(10)

    def close(self) -> None:
        """Stop the child (politely, then by force) and release the pipe. Idempotent."""
        if self._process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(("stop",))
            self._process.join(2)
        self._kill()
        self._conn.close()

    def __enter__(self) -> IsolatedWorker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
