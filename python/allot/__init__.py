"""allot for Python: share one machine's CPUs between parallel programs.

- :class:`Cell` -- this process's share of the machine, granted by the allot
  broker (or, without one, the CPUs the process may use: ``cell.mode ==
  "standalone"`` and ``cell.reason`` says why). ``cell.grant()`` reads the
  grant, ``cell.wait_change()`` waits for the next one.
- :func:`require` -- a guarantee and a limit for a block of code (whole or
  fractional CPUs, NUMA nodes), as a ``with`` block or a decorator.
- :func:`follow_blas` -- the BLAS and OpenMP pools already in the
  interpreter (numpy's OpenBLAS, MKL, BLIS, libgomp) sized to the grant
  whenever it changes, through threadpoolctl.
- :class:`GrantExecutor` -- a ``concurrent.futures`` executor whose number
  of concurrently running tasks follows the grant.

Programs started with ``allot run`` are already in a cell:
``Cell.auto()`` finds it. docs/python.md is the guide.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import threading
import weakref
from typing import Any, Callable, Optional, TypeVar

from ._allot import (
    Cell,
    Grant,
    Outcome,
    Require,
    Window,
    allowed_cpus,
    given_back,
    release_on,
    PROTOCOL_VERSION,
)

__all__ = [
    "Cell",
    "Grant",
    "Outcome",
    "Window",
    "require",
    "follow_blas",
    "BlasFollower",
    "GrantExecutor",
    "allowed_cpus",
    "given_back",
    "release_on",
    "PROTOCOL_VERSION",
]

F = TypeVar("F", bound=Callable[..., Any])


class require:
    """A ``require`` block: ``with allot.require(cores=2) as out: ...`` or
    ``@allot.require(cores=2)``.

    Keywords: ``cores=N`` (N whole CPUs, exclusive), ``fair=True`` (the
    fair share of the CPUs), ``cpu_fraction=F`` (F of one CPU,
    ``cpu_device`` picks which), ``numa_nodes=N``. The block waits until
    the request can be met; on entry the calling thread is confined to what
    was granted (``out.cpus``); everything is given back however the block
    is left. Each entry makes a new scope, so the same object may be used
    from several threads and recursively.
    """

    def __init__(self, **kwargs: Any) -> None:
        Require(**kwargs)  # check the arguments now, not at first use
        self._kwargs = kwargs
        self._held = threading.local()

    def __enter__(self) -> Outcome:
        stack = self._held.__dict__.setdefault("stack", [])
        scope = Require(**self._kwargs)
        out = scope.__enter__()
        stack.append(scope)
        return out

    def __exit__(self, *exc: Any) -> bool:
        self._held.stack.pop().__exit__(*exc)
        return False

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class BlasFollower:
    """Keeps the interpreter's native thread pools at the cell's grant.

    A daemon thread waits for grant changes and applies
    ``threadpoolctl.threadpool_limits(threads)`` to the BLAS and OpenMP
    libraries loaded in the process (a change applies from each library's
    next call). ``stop()`` ends it. Under ``allot run`` the preloaded shim
    already does this for the libraries it knows; this is for programs that
    make their own cell.
    """

    def __init__(self, cell: Cell, user_api: Optional[str] = None) -> None:
        try:
            import threadpoolctl
        except ImportError as e:  # pragma: no cover - depends on the install
            raise RuntimeError(
                "follow_blas needs threadpoolctl: pip install 'allot[blas]' "
                "(or threadpoolctl)"
            ) from e
        self._tpc = threadpoolctl
        self._cell = cell
        self._user_api = user_api  # None: every library threadpoolctl knows
        self._stop = threading.Event()
        self.applied: Optional[int] = None
        self._apply(cell.grant())
        self._thread = threading.Thread(
            target=self._run, name="allot-blas-follower", daemon=True
        )
        self._thread.start()
        _live.add(self)

    def _apply(self, g: Grant) -> None:
        if g.threads != self.applied:
            self._tpc.threadpool_limits(limits=g.threads, user_api=self._user_api)
            self.applied = g.threads

    def _run(self) -> None:
        seen = self._cell.grant().generation
        while not self._stop.is_set():
            try:
                g = self._cell.wait_change(seen, timeout=0.5)
            except RuntimeError:
                return  # the cell was closed
            seen = g.generation
            self._apply(g)

    def stop(self) -> None:
        """Stops following (the pools keep their last size)."""
        self._stop.set()
        self._thread.join()
        _live.discard(self)


def follow_blas(cell: Optional[Cell] = None, user_api: Optional[str] = None) -> BlasFollower:
    """Sizes the process's BLAS and OpenMP pools (or only ``user_api``,
    ``"blas"`` or ``"openmp"``) to ``cell``'s grant (``Cell.auto()`` by
    default) now and whenever it changes."""
    return BlasFollower(cell if cell is not None else Cell.auto(), user_api)


class GrantExecutor(concurrent.futures.Executor):
    """A thread-pool executor that runs at most ``cell.threads()`` tasks at
    once, following the grant as it changes.

    Threads are created up to ``max_workers`` (default: the CPUs the process
    may use); tasks beyond the grant wait their turn. ``workers`` is the
    current limit.
    """

    def __init__(self, cell: Optional[Cell] = None, max_workers: Optional[int] = None) -> None:
        self._cell = cell if cell is not None else Cell.auto()
        n = max_workers or max(1, len(allowed_cpus()))
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=n, thread_name_prefix="allot-worker"
        )
        self._cv = threading.Condition()
        self._running = 0
        self._limit = max(1, min(n, self._cell.threads()))
        self._max = n
        self._closed = threading.Event()
        self._follower = threading.Thread(
            target=self._follow, name="allot-executor-follower", daemon=True
        )
        self._follower.start()
        _live.add(self)

    @property
    def workers(self) -> int:
        """How many tasks may run at once now."""
        with self._cv:
            return self._limit

    def _follow(self) -> None:
        seen = self._cell.grant().generation
        while not self._closed.is_set():
            try:
                g = self._cell.wait_change(seen, timeout=0.5)
            except RuntimeError:
                return
            seen = g.generation
            with self._cv:
                self._limit = max(1, min(self._max, g.threads))
                self._cv.notify_all()

    def _gated(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        with self._cv:
            while self._running >= self._limit:
                self._cv.wait()
            self._running += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with self._cv:
                self._running -= 1
                self._cv.notify()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        return self._pool.submit(self._gated, fn, args, kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed.set()
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
        if wait:
            self._follower.join()
        _live.discard(self)

    def stop(self) -> None:
        """Stops following the grant (at interpreter exit)."""
        self._closed.set()
        self._follower.join()


# Followers still running at interpreter exit are stopped first: a daemon
# thread that is inside a native wait when the interpreter finalizes would
# be ended by force in the middle of native frames.
_live: "weakref.WeakSet" = weakref.WeakSet()


@atexit.register
def _stop_followers() -> None:
    for f in list(_live):
        f.stop()
