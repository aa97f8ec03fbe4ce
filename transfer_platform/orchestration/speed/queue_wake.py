"""The run queue passed over as soon as a run is queued or ends, not at the next interval.

Dagster's daemon passes over the run queue every ``dequeue_interval_seconds`` (and waits in
half-second steps, whatever the interval): a small transfer queued just after a pass waits for the
next one, which on an idle queue is most of its latency. With PostgreSQL run storage (production,
``deploy/dagster.production.yaml``):

- every process that queues a run (the coordinator's ``submit_run``: the UI, backfills, the
  sensor, ``transfer --enqueue``, the API) and every run worker whose run ends (a slot freed)
  sends ``NOTIFY transfer_platform_run_queue`` (:func:`notify`, best effort: a failure only means
  the run waits for the interval, as without it);
- the daemon's queue pass (Dagster's ``QueuedRunCoordinatorDaemon.run_iteration``, wrapped once
  through :mod:`~transfer_platform.orchestration.speed.dagster_internals`) starts when woken by such a
  notification (a thread of the daemon LISTENs on the run storage's database) or when the interval
  has passed since the previous pass, whichever is first. Passes stay at least as far apart as the
  previous pass took (a burst of 1,000 queued runs never keeps the daemon's queue busy more than
  half of the time), and the interval is kept to the fraction given.

Without PostgreSQL run storage (SQLite under ``dagster dev``) nothing is sent or listened to: the
queue is passed over every ``dequeue_interval_seconds``, exactly (fractions included).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

_LOG = logging.getLogger("transfer_platform.queue_wake")
CHANNEL = "transfer_platform_run_queue"
#: how often a waiting pass looks at the daemon's shutdown and heartbeats (it yields to the daemon)
SLICE_SECONDS = 0.1
#: the least time between two passes (a pass on an idle queue takes a few milliseconds)
MIN_GAP_SECONDS = 0.01
#: a LISTEN connection that failed is opened again after this many seconds (doubling up to 60)
RETRY_SECONDS = 1.0


def _postgres_url(instance: Any) -> str | None:  # a DagsterInstance
    """The run storage's database (PostgreSQL only), as libpq takes it (no SQLAlchemy driver)."""
    url = getattr(instance.run_storage, "postgres_url", None)
    if not url:
        return None
    scheme, rest = url.split("://", 1)
    return f"{scheme.split('+', 1)[0]}://{rest}"


def notify(instance: Any) -> None:  # a DagsterInstance
    """Wake the daemon's queue (a run was queued, or one ended); nothing without PostgreSQL."""
    storage = instance.run_storage
    if getattr(storage, "postgres_url", None) is None:
        return
    try:
        from sqlalchemy import text

        with storage.connect() as conn:  # dagster-postgres's connections autocommit
            conn.execute(text(f"NOTIFY {CHANNEL}"))
    except Exception as exc:  # noqa: BLE001 - the queue's interval still passes over the run
        _LOG.debug("could not wake the run queue (%s); it passes at its interval", type(exc).__name__)


class Listener:
    """A daemon thread LISTENing on :data:`CHANNEL`; ``event`` is set by each notification (and
    after each (re)connection, so that nothing sent while it was away waits for the interval)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.event = threading.Event()
        self.listening = threading.Event()
        threading.Thread(target=self._run, name="transfer_platform-queue-wake", daemon=True).start()

    def _run(self) -> None:
        import psycopg

        retry, warned = RETRY_SECONDS, False
        while True:
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    self.event.set()
                    retry, warned = RETRY_SECONDS, False
                    for _ in conn.notifies():
                        self.event.set()
            except Exception as exc:  # noqa: BLE001 - the interval passes meanwhile
                self.listening.clear()
                if not warned:  # the reason only: the URL holds the password
                    _LOG.warning("the run queue cannot listen for queued runs on the run storage's "
                                 "database (%s: %s); it passes at its dequeue interval until it can",
                                 type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
                    warned = True
                time.sleep(retry)
                retry = min(retry * 2, 60.0)


_LISTENERS: dict[str, Listener] = {}
_LISTENERS_LOCK = threading.Lock()


def listener_for(instance: Any) -> Listener | None:  # a DagsterInstance
    """This process's listener for the instance's run storage (started once), None without PostgreSQL."""
    url = _postgres_url(instance)
    if url is None:
        return None
    with _LISTENERS_LOCK:
        if url not in _LISTENERS:
            _LISTENERS[url] = Listener(url)
        return _LISTENERS[url]


def prompt_pass(run_iteration):
    """Dagster's queue pass (``run_iteration``), preceded by the wait described in the module:
    until woken or the interval has passed since the previous pass started. Meant for a daemon whose
    own loop does not wait (the coordinator's ``dequeue_interval_seconds`` reads 0 once this is
    installed)."""

    @functools.wraps(run_iteration)
    def wrapped(self, workspace_process_context, *args: Any, **kwargs: Any) -> Iterator[Any]:
        instance = workspace_process_context.instance
        interval = getattr(instance.run_coordinator, "configured_dequeue_interval_seconds", 5.0)
        listener = listener_for(instance)
        last_start, last_took = getattr(self, "_tp_last_pass", (float("-inf"), 0.0))
        gap = max(MIN_GAP_SECONDS, last_took)
        while True:
            since = time.monotonic() - last_start
            if since >= interval:
                break
            if listener is not None and listener.event.is_set():
                if since >= gap:
                    break
                time.sleep(min(SLICE_SECONDS, gap - since))
            elif listener is not None:
                listener.event.wait(min(SLICE_SECONDS, interval - since))
            else:
                time.sleep(min(SLICE_SECONDS, interval - since))
            yield None  # the daemon's heartbeat and shutdown
        if listener is not None:
            listener.event.clear()  # a run queued from now on wakes the next pass
        start = time.monotonic()
        try:
            yield from run_iteration(self, workspace_process_context, *args, **kwargs)
        finally:
            self._tp_last_pass = (start, time.monotonic() - start)

    wrapped.transfer_platform_prompt_pass = True
    return wrapped
