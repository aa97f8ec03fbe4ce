"""``GET /transfers`` over many recorded transfers: the API's page of transfers against a floor.

A Dagster instance whose storage is PostgreSQL (a fresh database, dropped afterwards; the
production ``dagster.yaml``) gets N transfers recorded through its storage API, in bulk
(:func:`record_transfers`): per transfer one ``add_historical_run`` (its creation time spread over
the past N minutes), the run events that set its status, start and end times
(``run_storage.handle_run_event`` with the event's time), and per ended transfer a step success and
two materializations with the platform's metadata (``event_log_storage.store_event_batch``,
1,000 transfers' events per batch); 8 threads over pooled connections. Statuses: 70% SUCCESS, 10%
failed (half PARTIAL_FAILURE, half ERROR, as the transfer job tags them), 10% cancelled, 5%
not started (PENDING: a queued run needs a code location's origin), 5% running; 100 destinations; user tags ``team=t0..t9`` and ``tenant=...``.

Then the API (``transfer_platform.api.app.create_app`` with a store in a schema of the test
database, through FastAPI's TestClient: the whole request, authentication included) answers:
the first page, a deep page (the cursor of the transfer 90% down the list), ``status=ERROR``
(Dagster's FAILURE plus tags), ``status=SUCCESS``, ``include_tags=team.t3``; each the median of
``--repeat`` requests. The floor: the same page read with two plain SQL queries on the same tables
(the page of runs by the tag filter, then its runs' events), psycopg, no deserialization.

Then enqueueing: ``POST /destinations/d0/transfer`` (a dry run of one model, queued; no daemon runs
it) once, which loads the code location of the repository's ``workspace.yaml`` (the API starts its
code server and keeps it), then ``--enqueues`` times more, each timed from the request to the
answer (the run created from the kept location, submitted through the run coordinator, read back);
their median and maximum, beside a floor: ``GET /destinations/d0`` (the same authentication and
store, no Dagster). The configuration holds two PostgreSQL destinations of two models
(``benchmarks.scale``'s, nothing is read from them).

    .venv/bin/python -m benchmarks.api_transfers --transfers 100000

Numbers are printed, never asserted (the smoke test runs it at a tiny size).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from benchmarks.common import PG, storage_env
from benchmarks.scale import raw_config, storage_database

STATUSES = ["SUCCESS"] * 14 + ["PARTIAL_FAILURE", "ERROR", "CANCELLED", "KILLED", "PENDING", "RUNNING"]


def _events(run_id: str, destination: str, when: datetime):
    """The step success and two materializations of one ended transfer (as the transfer op logs them)."""
    import dagster as dg
    from dagster._core.events import (
        StepMaterializationData,  # the event's payload (no public constructor)
    )

    entries = []
    for index, model in enumerate(("items", "notes")):
        materialization = dg.AssetMaterialization(
            asset_key=["acme", destination, model], partition="2025-01-01",
            metadata={"rows_transferred": 100 + index, "delta_rows_transferred": 10,
                      "volume_transferred_in_mb": 0.25, "most_recent_last_updated_at": when.timestamp() - 60})
        entries.append(dg.DagsterEvent(
            event_type_value=dg.DagsterEventType.ASSET_MATERIALIZATION.value, job_name="transfer",
            step_key="run_transfer", event_specific_data=StepMaterializationData(materialization)))
    return [dg.EventLogEntry(error_info=None, level=20, user_message="", run_id=run_id, timestamp=when.timestamp(),
                             dagster_event=event, job_name="transfer") for event in entries]


def record_one(instance, k: int, now: datetime, spacing: timedelta) -> list:
    """Transfer ``k`` (0 the oldest): its run, status and times; returns its events to store."""
    import dagster as dg

    from transfer_platform.core.lifecycle import MODELS_FAILED_TAG, MODELS_SUCCEEDED_TAG
    from transfer_platform.orchestration.scheduling.run_tags import (
        DESTINATION_TAG,
        KIND_TAG,
        MODELS_TAG,
        STATUS_TAG,
        USER_TAG_PREFIX,
    )

    status = STATUSES[k % len(STATUSES)]
    destination = f"d{k % 100}"
    tags = {KIND_TAG: "transfer", DESTINATION_TAG: destination, MODELS_TAG: "items,notes",
            USER_TAG_PREFIX + "team": f"t{k % 10}", USER_TAG_PREFIX + "tenant": f"tenant-{k % 1000}"}
    if status in ("SUCCESS", "PARTIAL_FAILURE", "ERROR", "CANCELLED", "KILLED"):
        tags[STATUS_TAG] = status
    if status in ("PARTIAL_FAILURE", "ERROR"):
        tags[MODELS_SUCCEEDED_TAG] = "1" if status == "PARTIAL_FAILURE" else "0"
        tags[MODELS_FAILED_TAG] = "1" if status == "PARTIAL_FAILURE" else "2"
    run_id = str(uuid.uuid4())
    created = now - spacing * (RECORDING["count"] - k)
    run = dg.DagsterRun(job_name="transfer", run_id=run_id, tags=tags, status=dg.DagsterRunStatus.NOT_STARTED,
                        run_config={"ops": {"run_transfer": {"config": {"destination": destination, "models": []}}}})
    storage = instance.run_storage
    storage.add_historical_run(run, created)
    if status == "PENDING":
        return []
    if status == "CANCELLED":
        storage.handle_run_event(run_id, _run_event("RUN_CANCELED"), created + timedelta(seconds=5))
        return []
    storage.handle_run_event(run_id, _run_event("RUN_START"), created + timedelta(seconds=1))
    if status == "RUNNING":
        return []
    ended = created + timedelta(seconds=20)
    end_event = {"SUCCESS": "RUN_SUCCESS", "KILLED": "RUN_CANCELED"}.get(status, "RUN_FAILURE")
    storage.handle_run_event(run_id, _run_event(end_event), ended)
    return _events(run_id, destination, ended) if status != "KILLED" else []


RECORDING = {"count": 0}


def _run_event(kind: str):
    import dagster as dg

    return dg.DagsterEvent(event_type_value=dg.DagsterEventType[kind].value, job_name="transfer")


def record_transfers(instance, count: int, *, now: datetime | None = None, threads: int = 8,
                     spacing: timedelta = timedelta(seconds=30)) -> float:
    """Record ``count`` transfers (see the module's doc); returns the seconds it took."""
    now = now or datetime.now(UTC)
    RECORDING["count"] = count
    instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=threads)
    began = time.perf_counter()
    chunk = 1000
    with ThreadPoolExecutor(threads) as pool:
        def one_chunk(first: int) -> None:
            events = []
            for k in range(first, min(first + chunk, count)):
                events.extend(record_one(instance, k, now, spacing))
            if events:
                instance.event_log_storage.store_event_batch(events)

        list(pool.map(one_chunk, range(0, count, chunk)))
    return time.perf_counter() - began


def _median_ms(run, repeat: int) -> tuple[float, object]:
    seconds, result = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        result = run()
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds) * 1000, result


def floor_page(database: str, tag_key: str, tag_value: str, size: int) -> int:
    """One page read with plain SQL: the newest ``size`` runs carrying the tag, then their events."""
    import psycopg

    with psycopg.connect(host=PG["host"], port=PG["port"], user=PG["user"], dbname=database) as conn:
        rows = conn.execute(
            "SELECT r.run_id, r.run_body FROM runs r WHERE EXISTS (SELECT 1 FROM run_tags t WHERE "
            "t.run_id = r.run_id AND t.key = %s AND t.value = %s) ORDER BY r.id DESC LIMIT %s",
            (tag_key, tag_value, size)).fetchall()
        events = conn.execute(
            "SELECT run_id, event FROM event_logs WHERE run_id = ANY(%s) AND dagster_event_type = ANY(%s)",
            ([r[0] for r in rows], ["ASSET_MATERIALIZATION", "STEP_SUCCESS", "STEP_FAILURE",
                                    "ASSET_CHECK_EVALUATION"])).fetchall()
    return len(rows) + len(events)


def analyze(database: str) -> None:
    """``ANALYZE`` the bulk-loaded tables, as autovacuum does soon after such a load in production:
    without statistics PostgreSQL plans the tag joins for an empty table."""
    import psycopg

    with psycopg.connect(host=PG["host"], port=PG["port"], user=PG["user"], dbname=database,
                         autocommit=True) as conn:
        conn.execute("ANALYZE runs, run_tags, event_logs")


@contextmanager
def _database(args) -> Iterator[str]:
    if args.database:
        yield args.database
    elif args.keep:
        import psycopg

        database = f"tp_api_transfers_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(host=PG["host"], port=PG["port"], user=PG["user"], dbname=PG["dbname"],
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{database}"')
        yield database  # kept: DROP DATABASE it when done
    else:
        with storage_database() as database:
            yield database


def time_enqueues(client, headers: dict[str, str], calls: int) -> dict:
    """``POST /destinations/d0/transfer`` once (the code location's load), then ``calls`` times:
    milliseconds of the first, the median and maximum of the others, and the floor (the median of
    as many ``GET /destinations/d0``)."""
    body = {"models": ["m0"], "is_debug_mode": True}

    def post() -> float:
        began = time.perf_counter()
        answer = client.post("/destinations/d0/transfer", json=body, headers=headers)
        seconds = time.perf_counter() - began
        assert answer.status_code == 201, answer.text
        return seconds * 1000

    def get() -> float:
        began = time.perf_counter()
        answer = client.get("/destinations/d0", headers=headers)
        seconds = time.perf_counter() - began
        assert answer.status_code == 200, answer.text
        return seconds * 1000

    first = post()
    timed = [post() for _ in range(calls)]
    floor = [get() for _ in range(calls)]
    return {"first_ms": round(first, 1), "calls": calls, "median_ms": round(statistics.median(timed), 1),
            "max_ms": round(max(timed), 1), "floor_ms": round(statistics.median(floor), 1),
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transfers", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7, help="requests per case (the median is shown)")
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--json", help="also write the numbers to this file")
    parser.add_argument("--database", help="time an existing database of a previous --keep run (no recording)")
    parser.add_argument("--keep", action="store_true", help="keep the database (its name is printed)")
    parser.add_argument("--profile", action="store_true", help="print the first page's top functions (cProfile)")
    parser.add_argument("--enqueues", type=int, default=10,
                        help="transfer requests timed after the first (their median and maximum are shown)")
    args = parser.parse_args(argv)

    import dagster as dg
    from cryptography.fernet import Fernet
    from fastapi.testclient import TestClient

    from transfer_platform.api.app import create_app
    from transfer_platform.config.secrets import SECRET_KEY_ENV
    from transfer_platform.orchestration.scheduling.run_tags import KIND_TAG
    from transfer_platform.store.api_keys import create_key
    from transfer_platform.store.database import migrate

    uptime_before = os.popen("uptime").read().strip()
    results: dict = {"transfers": args.transfers, "page_size": args.page_size, "cases": {}}
    store_schema = f"tp_bench_store_{uuid.uuid4().hex[:8]}"
    saved = {k: os.environ.get(k) for k in ("DAGSTER_HOME", "DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB",
                                            "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", SECRET_KEY_ENV)}
    with tempfile.TemporaryDirectory() as work, _database(args) as database:
        try:
            home = Path(work) / "home"
            home.mkdir()
            settings = yaml.safe_load((Path(__file__).parents[1] / "deploy" / "dagster.production.yaml").read_text())
            (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
            os.environ.update({"DAGSTER_HOME": str(home), **storage_env(database),
                               SECRET_KEY_ENV: Fernet.generate_key().decode()})
            if not args.database:
                with dg.DagsterInstance.get() as instance:
                    seconds = record_transfers(instance, args.transfers)
                analyze(database)
                results["recorded_seconds"] = round(seconds, 1)
                print(f"recorded {args.transfers:,} transfers in {seconds:.1f} s "
                      f"({args.transfers / seconds:,.0f} a second) in database {database}", flush=True)

            config = Path(work) / "transfer_platform.yaml"
            config.write_text(yaml.safe_dump({**raw_config(2, 2), "store": {"connection": {
                "host": PG["host"], "port": PG["port"], "database": PG["dbname"], "username": PG["user"],
                "schema": store_schema}}}))
            app = create_app(config)
            migrate(app.state.store.settings.connection)
            _, key = create_key(app.state.store.engine, "benchmark")
            headers = {"X-API-KEY": key}
            with TestClient(app) as client:
                def get(url: str) -> dict:
                    answer = client.get(url, headers=headers)
                    assert answer.status_code == 200, answer.text
                    return answer.json()["data"]

                get("/transfers?page_size=1")  # opens the instance (once per application)
                with dg.DagsterInstance.get() as instance:
                    records = instance.get_run_records(dg.RunsFilter(tags={KIND_TAG: "transfer"}),
                                                       limit=max(1, int(args.transfers * 0.9)))
                    deep = records[-1].dagster_run.run_id
                size = args.page_size
                cases = {
                    "first page": f"/transfers?page_size={size}",
                    "deep page (cursor 90% down)": f"/transfers?page_size={size}&cursor={deep}",
                    "status=ERROR": f"/transfers?page_size={size}&status=ERROR",
                    "status=SUCCESS": f"/transfers?page_size={size}&status=SUCCESS",
                    "include_tags=team.t3": f"/transfers?page_size={size}&include_tags=team.t3",
                }
                if args.profile:
                    import cProfile
                    import pstats

                    from transfer_platform.orchestration.runs.transfers import (
                        TransferFilter,
                        page_transfers,
                    )

                    profile = cProfile.Profile()
                    profile.runcall(page_transfers, app.state.dagster_instance, TransferFilter(limit=size))
                    pstats.Stats(profile).sort_stats("tottime").print_stats(25)
                floor_ms, _ = _median_ms(lambda: floor_page(database, KIND_TAG, "transfer", size), args.repeat)
                results["floor_ms"] = round(floor_ms, 1)
                print(f"floor (two SQL queries, one page of runs and their events): {floor_ms:.1f} ms", flush=True)
                for name, url in cases.items():
                    ms, data = _median_ms(lambda url=url: get(url), args.repeat)
                    results["cases"][name] = {"median_ms": round(ms, 1), "transfers": len(data["transfers"]),
                                              "has_next": data["has_next"], "ratio_to_floor": round(ms / floor_ms, 1)}
                    print(f"GET {url[:70]:70} {ms:7.1f} ms  ({len(data['transfers'])} transfers, "
                          f"has_next {data['has_next']}, {ms / floor_ms:.1f}x the floor)", flush=True)
                results["enqueue"] = time_enqueues(client, headers, args.enqueues)
                results["enqueue"]["code_location_loads"] = app.state.workspaces.loads
                enqueue = results["enqueue"]
                print(f"POST /destinations/d0/transfer: first {enqueue['first_ms']:.0f} ms (loads the code location); "
                      f"then median {enqueue['median_ms']:.0f} ms, max {enqueue['max_ms']:.0f} ms over "
                      f"{enqueue['calls']} (floor GET /destinations/d0: {enqueue['floor_ms']:.1f} ms; load "
                      f"{enqueue['load']})", flush=True)
            app.state.store.engine.dispose()
        finally:
            from benchmarks.common import pg_connect

            with pg_connect(autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{store_schema}" CASCADE')
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    results["machine"] = {"uptime_before": uptime_before, "uptime_after": os.popen("uptime").read().strip(),
                          "cpus": os.cpu_count()}
    print(f"load: before {uptime_before}; after {results['machine']['uptime_after']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
