"""What a case costs in CPU-seconds, not only in wall time: the source database's backends, the
destination's, and the client side (the processes that moved the rows), so that a busy machine
cannot hide a regression (wall time stretches under load; CPU-seconds barely do).

**The client side** is this process, every process descending from it (the command line, Sling,
the Spark Connect server, the daemon and its run workers) and every process carrying
``marker`` in its environment (``TRANSFER_PLATFORM_SHARED_SPARK_DIR=<the run's folder>``: the
shared Spark server and the resident command process the command line starts, which detach from
it), and their descendants. At an instant, their CPU is the sum over the live ones of
``utime + stime + cutime + cstime`` from ``/proc/<pid>/stat`` (``cutime``: the children each
has waited for, so that a command that ended inside the window still counts) plus this
process's :func:`os.times`. The case's cost is that sum at its end minus at its start; the
sampling thread's own CPU is taken off. Not seen: a detached process that ended inside the window
(no member waited for it).

**The database side** is the PostgreSQL server (source and destination are two connections to it).
A thread samples ``pg_stat_activity`` every ``interval`` seconds and reads ``/proc/<pid>/stat`` of
each client backend: a backend is the *destination*'s once a query of it names a schema of the run other than the source's
(``<SCHEMA>_...``), else the *source*'s once one names the source table (a destination's
``CREATE TABLE ... (LIKE <source>)`` names both).
Its cost is its CPU at its last sample minus its CPU at the window's start (0 if it started
inside). Not seen: a backend's CPU after its last sample if it ends inside the window (at most
``interval`` seconds of it), a backend that lives less than ``interval`` seconds, and a backend
none of whose sampled queries named a table of the run. ``server`` is the whole server's CPU
over the window (the postmaster's own, and its ``cutime`` for every backend that ended, plus the
live backends and background processes): it includes the WAL writer, checkpointer and
autovacuum the case caused, and also whatever other clients of the server did meanwhile.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from benchmarks.common import SCHEMA, pg_connect

TICK = os.sysconf("SC_CLK_TCK")


def stat(pid: int) -> tuple[int, float, float, int] | None:
    """(parent, own CPU s, waited-for children's CPU s, start time in ticks) of a process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # fields[0] is the state (field 3); utime..cstime are fields 14-17, starttime 22
    return (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK,
            (int(fields[13]) + int(fields[14])) / TICK, int(fields[19]))


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def processes() -> dict[int, tuple[int, float, float, int]]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (values := stat(int(entry.name))) is not None:
            found[int(entry.name)] = values
    return found


class ClientTree:
    """This process's descendants and the processes carrying ``marker`` (``KEY=value``) in their
    environment, with theirs; the environment of each process is read once."""

    def __init__(self, marker: str | None) -> None:
        self.marker = marker.encode() if marker else None
        self._marked: dict[tuple[int, int], bool] = {}

    def _is_marked(self, pid: int, start: int) -> bool:
        key = (pid, start)
        if key not in self._marked:
            try:
                self._marked[key] = self.marker is not None and self.marker in \
                    Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                self._marked[key] = False
        return self._marked[key]

    def members(self, procs: dict[int, tuple[int, float, float, int]]) -> list[int]:
        children: dict[int, list[int]] = {}
        for pid, (parent, *_rest) in procs.items():
            children.setdefault(parent, []).append(pid)
        me = os.getpid()
        roots = [pid for pid, values in procs.items() if pid != me and self._is_marked(pid, values[3])]
        seen, todo = set(), [*children.get(me, []), *roots]
        while todo:
            pid = todo.pop()
            if pid not in seen:
                seen.add(pid)
                todo += children.get(pid, [])
        seen.discard(me)
        return sorted(seen)

    def cpu(self) -> float:
        """CPU-seconds so far of the whole client side (see the module's text)."""
        procs = processes()
        mine = os.times()
        total = mine.user + mine.system + mine.children_user + mine.children_system
        for pid in self.members(procs):
            total += procs[pid][1] + procs[pid][2]
        return total

    def rss(self) -> int:
        procs = processes()
        return rss_bytes(os.getpid()) + sum(rss_bytes(pid) for pid in self.members(procs))


SOURCE_QUERY = re.compile(rf'\b{SCHEMA}"?\."?events\b')
DESTINATION_QUERY = re.compile(rf"\b{SCHEMA}_\w")


class Cost:
    """CPU-seconds (and the client side's peak resident memory) of the block, as the module's
    text says: ``with Cost(marker) as cost: ...`` then ``cost.report``."""

    def __init__(self, marker: str | None = None, interval: float = 0.1) -> None:
        self.tree = ClientTree(marker)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._role: dict[int, str] = {}  # backend pid -> "source" / "destination"
        self._base: dict[int, float] = {}  # backend pid -> its CPU at the start
        self._last: dict[int, float] = {}  # backend pid -> its CPU at its last sample
        self._sampler_cpu = 0.0
        self.peak_rss = self.start_rss = 0
        self.report: dict = {}

    # -- the server --
    def _server(self) -> float:
        procs = processes()
        main = self._postmaster
        total = procs[main][1] + procs[main][2] if main in procs else 0.0
        return total + sum(v[1] + v[2] for pid, v in procs.items() if v[0] == main)

    def _sample(self, conn, *, first: bool = False) -> None:
        rows = conn.execute("SELECT pid, query FROM pg_stat_activity WHERE backend_type = 'client backend' "
                            "AND pid <> pg_backend_pid()").fetchall()
        for pid, query in rows:
            values = stat(pid)
            if values is None:
                continue
            if first:
                self._base[pid] = values[1]
            # a destination's query may name the source too (``CREATE TABLE ... (LIKE <source>)``);
            # a source's never names a destination's schema: the destination's role wins
            if query and DESTINATION_QUERY.search(query):
                self._role[pid] = "destination"
            elif query and pid not in self._role and SOURCE_QUERY.search(query):
                self._role[pid] = "source"
            self._last[pid] = values[1]

    def _watch(self) -> None:
        start = time.thread_time()
        try:
            while not self._stop.wait(self.interval):
                self._sample(self._conn)
                self.peak_rss = max(self.peak_rss, self.tree.rss())
        finally:
            self._sampler_cpu = time.thread_time() - start

    def __enter__(self) -> Cost:
        self._conn = pg_connect(autocommit=True)
        self._postmaster = stat(self._conn.info.backend_pid)[0]
        self._sample(self._conn, first=True)
        self.peak_rss = self.start_rss = self.tree.rss()
        self._client0, self._server0 = self.tree.cpu(), self._server()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        client1, server1 = self.tree.cpu(), self._server()
        self._stop.set()
        self._thread.join()
        self._sample(self._conn)
        self.peak_rss = max(self.peak_rss, self.tree.rss())
        self._conn.close()
        spent = {"source": 0.0, "destination": 0.0}
        for pid, role in self._role.items():
            spent[role] += self._last[pid] - self._base.get(pid, 0.0)
        self.report = {"source": round(spent["source"], 2), "destination": round(spent["destination"], 2),
                       "client": round(client1 - self._client0 - self._sampler_cpu, 2),
                       "server": round(server1 - self._server0, 2)}


def median_cost(reports: list[dict]) -> dict:
    """Each part's median over the runs."""
    import statistics

    return {key: round(statistics.median(r[key] for r in reports), 2) for key in reports[0]} if reports else {}


def per_million(cost: dict, rows: int) -> dict:
    return {key: round(value * 1e6 / rows, 2) for key, value in cost.items()} if rows else {}
