"""Onboarding through the REST API until Dagster shows it: N recipients, each with one PostgreSQL
destination, created through a real ``transfer-platform api`` server (uvicorn, its own process) by
an httpx client, one request at a time, while a real ``dagster-webserver`` (the shipped workspace:
the code location in a gRPC server the webserver starts) is the API's ``api.dagster_url``; then
the time until the webserver's GraphQL lists every new destination's asset.

    .venv/bin/python -m benchmarks.api_onboarding --recipients 1000 [--json out.json]

It prints: the API's creates (total, per request median / p95, first and last hundred), the
reloads the API asked for (how many: the API's reloader coalesces the changes made while a reload
runs, so 2N changes cost a few reloads, not 2N) and their seconds, the time from the last answer
and from the first request to "every asset in Dagster". Floors measured in the same run: the same
rows inserted straight into the store's table in one transaction, and the definitions built in
process from an equivalent file-only configuration (no store). Numbers are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import yaml

from benchmarks.common import PG, SCHEMA, drop_schemas, pg_connect
from benchmarks.end_to_end import uptime

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]

ASSETS = "query { assetNodes { assetKey { path } } }"
LOCATIONS = """query { workspaceOrError { ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
#: the API server's reloader says so on each reload it finished (``dagster_reload.Reloader``)
RELOADED = re.compile(r"reloaded \d+ code location\(s\) in ([\d.]+) s")
IDLE = re.compile(r"idle after (\d+) reload\(s\)")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def connection(schema: str | None = None) -> dict:
    block = {"host": PG["host"], "port": PG["port"], "database": PG["dbname"], "username": PG["user"]}
    if schema:
        block["schema"] = schema
    return block


def model(source_schema: str) -> dict:
    start = datetime.now(UTC) - timedelta(days=2)
    return {"model_name": "events", "source_name": "src", "source_table": f"{source_schema}.events",
            "organization_column": "organization_id", "max_transfer_time_window_seconds": 86400,
            "min_start_time_epoch": int(start.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()),
            "columns": [{"name_in_source": "id", "data_type": "integer", "is_primary_key": True},
                        {"name_in_source": "organization_id", "data_type": "string"},
                        {"name_in_source": "updated_at", "data_type": "timestamp", "is_last_modified": True}]}


def entries(count: int) -> list[tuple[dict, dict]]:
    """(recipient, destination) bodies: each destination its own schema (its own physical place)."""
    return [({"name": f"r{i:05d}", "id_in_provider_system": f"org-{i:05d}"},
             {"name": f"r{i:05d}_pg", "vendor": "postgres", "recipient": f"r{i:05d}", "frequency_minutes": 15,
              "connection": connection(f"{SCHEMA}_d{i:05d}")}) for i in range(count)]


def graphql(url: str, query: str) -> dict:
    answer = httpx.post(url + "/graphql", json={"query": query}, timeout=600).raise_for_status().json()
    if answer.get("errors"):
        raise RuntimeError(f"GraphQL errors: {answer['errors'][:2]}")
    return answer["data"]


def transfer_assets(url: str) -> int:
    return sum(1 for node in graphql(url, ASSETS)["assetNodes"] if node["assetKey"]["path"][0] != "source")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(what: str, condition, timeout: float, process: subprocess.Popen | None = None, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited\n{log.read_text()[-3000:] if log else ''}")
        try:
            found = condition()
        except (httpx.HTTPError, OSError):
            found = None
        if found:
            return found
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n{log.read_text()[-3000:] if log else ''}")


def stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        process.wait()


def serve(config: str, port: int) -> None:
    """The API server the benchmark starts: ``transfer-platform api``'s application under uvicorn,
    with the reloader's log (INFO) on stderr, so its reloads can be counted."""
    import logging

    from transfer_platform.api.app import create_app
    from transfer_platform.api.app import serve as serve_api
    from transfer_platform.store.database import migrate

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    reload_log = logging.getLogger("transfer_platform.api.dagster_reload")
    reload_log.addHandler(handler)
    reload_log.setLevel(logging.INFO)
    app = create_app(config)
    migrate(app.state.store.settings.connection)
    serve_api(app, host="127.0.0.1", port=port)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def floor_store_insert(count: int, source_schema: str) -> float:
    """The same rows (validated documents) inserted into a fresh store's table in one transaction."""
    import sqlalchemy as sa

    from transfer_platform.config.models import StoreSettings
    from transfer_platform.store.database import engine_for, migrate
    from transfer_platform.store.resources import validate_entry
    from transfer_platform.store.tables import resources

    settings = StoreSettings.model_validate({"connection": connection(f"{SCHEMA}_floorstore")})
    migrate(settings.connection)
    rows = []
    began = time.perf_counter()
    for recipient, destination in entries(count):
        for kind, body in (("recipient", recipient), ("destination", destination)):
            rows.append({"id": str(uuid.uuid4()), "kind": kind, "name": body["name"],
                         "document": validate_entry(kind, body)})
    with engine_for(settings.connection).begin() as conn:
        conn.execute(sa.insert(resources), rows)
    return time.perf_counter() - began


def floor_definitions(work: Path, count: int, source_schema: str) -> tuple[float, int]:
    """The definitions built in process from the same entries written in the file (no store)."""
    from transfer_platform.definitions import build_definitions

    path = work / "file_only.yaml"
    pairs = entries(count)
    path.write_text(yaml.safe_dump({
        "sources": [{"name": "src", "vendor": "postgres", "connection": connection()}],
        "models": [model(source_schema)], "recipients": [r for r, _ in pairs],
        "destinations": [d for _, d in pairs]}, sort_keys=False))
    began = time.perf_counter()
    repository = build_definitions(str(path), shard="").get_repository_def()
    seconds = time.perf_counter() - began
    return seconds, sum(1 for node in repository.asset_graph.asset_nodes if node.key.path[0] != "source")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipients", type=int, default=1000)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--serve", nargs=2, metavar=("CONFIG", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return 0
    from cryptography.fernet import Fernet

    count = args.recipients
    results: dict = {"recipients": count, "uptime_before": uptime()}
    print(f"api_onboarding: {count} recipients with one PostgreSQL destination each  ({results['uptime_before']})",
          flush=True)
    source_schema, store_schema = f"{SCHEMA}_src", f"{SCHEMA}_store"
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="api_onboarding_") as folder:
        work = Path(folder)
        try:
            with pg_connect(autocommit=True) as conn:
                conn.execute(f'CREATE SCHEMA "{source_schema}"')
                conn.execute(f'CREATE TABLE "{source_schema}".events (id bigint PRIMARY KEY, '
                             "organization_id text, updated_at timestamptz)")
            dagster_port, api_port = free_port(), free_port()
            dagster_url, api_url = f"http://127.0.0.1:{dagster_port}", f"http://127.0.0.1:{api_port}"
            config = work / "transfer_platform.yaml"
            config.write_text(yaml.safe_dump({
                "sources": [{"name": "src", "vendor": "postgres", "connection": connection()}],
                "models": [model(source_schema)], "store": {"connection": connection(store_schema)},
                "api": {"dagster_url": dagster_url}}, sort_keys=False))
            home = work / "dagster_home"
            home.mkdir()
            (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
            env = {**os.environ, "DAGSTER_HOME": str(home), "TRANSFER_PLATFORM_CONFIG": str(config),
                   "TRANSFER_PLATFORM_SECRET_KEY": Fernet.generate_key().decode()}
            env.pop("TRANSFER_PLATFORM_SHARD", None)

            # the API first (it migrates the store the code location reads), then the webserver
            api_log = work / "api.log"
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "benchmarks.api_onboarding", "--serve", str(config), str(api_port)],
                env=env, cwd=REPO, stdout=api_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True))
            wait("the API", lambda: httpx.get(api_url + "/recipients", timeout=5).status_code == 401, 120,
                 processes[-1], api_log)
            key = subprocess.run([str(BIN / "transfer-platform"), "api-key", "create", "benchmark", "--config",
                                  str(config)], env=env, capture_output=True, text=True, check=True).stdout.strip()
            web_log = work / "webserver.log"
            began = time.perf_counter()
            processes.append(subprocess.Popen(
                [str(BIN / "dagster-webserver"), "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1",
                 "-p", str(dagster_port)], env=env, cwd=work, stdout=web_log.open("w"), stderr=subprocess.STDOUT,
                start_new_session=True))

            def loaded() -> bool:
                entries_ = graphql(dagster_url, LOCATIONS)["workspaceOrError"]["locationEntries"]
                return bool(entries_) and all(e["loadStatus"] == "LOADED" for e in entries_)

            wait("the webserver's code location", loaded, 600, processes[-1], web_log)
            print(f"webserver: code location loaded in {time.perf_counter() - began:.1f} s (no destination yet; "
                  f"load average {load()})", flush=True)

            # -- the creates ----------------------------------------------------------------------
            headers = {"X-API-KEY": key, "X-Prequel-Api-Version": "2023-12-01"}
            latencies: list[float] = []
            with httpx.Client(base_url=api_url, headers=headers, timeout=120) as client:
                first = time.perf_counter()
                for recipient, destination in entries(count):
                    for path, kind, body in (("/recipients", "recipient", recipient),
                                             ("/destinations", "destination", destination)):
                        sent = time.perf_counter()
                        answer = client.post(path, json={kind: body})
                        latencies.append(time.perf_counter() - sent)
                        if answer.status_code != 201:
                            raise RuntimeError(f"POST {path}: {answer.status_code} {answer.text[:500]}")
                last = time.perf_counter()
                idle_before = len(IDLE.findall(api_log.read_text()))
            created = last - first
            first_hundred, last_hundred = latencies[:100], latencies[-100:]
            print(f"API: {len(latencies)} creates in {created:.1f} s ({len(latencies) / created:.1f} a second); "
                  f"per request median {statistics.median(latencies) * 1000:.0f} ms, "
                  f"p95 {percentile(latencies, 0.95) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms; "
                  f"first 100 median {statistics.median(first_hundred) * 1000:.0f} ms, "
                  f"last 100 median {statistics.median(last_hundred) * 1000:.0f} ms  (load average {load()})",
                  flush=True)

            # -- until Dagster shows every asset ---------------------------------------------------
            wait("every asset in the webserver", lambda: transfer_assets(dagster_url) >= count, 1800,
                 processes[1], web_log)
            visible = time.perf_counter()
            print(f"Dagster: {count} assets visible {visible - last:.1f} s after the last answer, "
                  f"{visible - first:.1f} s after the first request", flush=True)
            # the API's reloader goes idle after the reload that followed the last change
            wait("the API's reloader to go idle", lambda: len(IDLE.findall(api_log.read_text())) > idle_before, 1800)
            reloads = [float(m.group(1)) for m in RELOADED.finditer(api_log.read_text())]
            print(f"reloads: {len(reloads)} asked by the API for {len(latencies)} changes (coalesced); "
                  f"each {', '.join(f'{s:.1f}' for s in reloads[:12])}{' ...' if len(reloads) > 12 else ''} s",
                  flush=True)
            began = time.perf_counter()
            from transfer_platform.api.dagster_reload import reload_locations

            reload_locations(dagster_url, timeout=1800)
            wait("the assets after a reload", lambda: transfer_assets(dagster_url) >= count, 1800)
            reload_now = time.perf_counter() - began
            print(f"one more reload with {count} destinations in the store: {reload_now:.1f} s "
                  f"(load average {load()})", flush=True)
            for process in processes:
                stop(process)
            processes.clear()

            # -- floors ----------------------------------------------------------------------------
            insert = floor_store_insert(count, source_schema)
            print(f"floor: the same {2 * count} rows inserted into the store's table in one transaction: "
                  f"{insert:.2f} s (API {created / insert:.0f}x)", flush=True)
            definitions, assets = floor_definitions(work, count, source_schema)
            print(f"floor: definitions of an equivalent file-only configuration built in process: "
                  f"{definitions:.1f} s, {assets} transfer assets", flush=True)
            results.update({
                "creates": len(latencies), "create_total_seconds": created,
                "create_median_ms": statistics.median(latencies) * 1000,
                "create_p95_ms": percentile(latencies, 0.95) * 1000,
                "create_first_100_median_ms": statistics.median(first_hundred) * 1000,
                "create_last_100_median_ms": statistics.median(last_hundred) * 1000,
                "assets_after_last_answer_seconds": visible - last, "total_seconds": visible - first,
                "reloads": len(reloads), "reload_seconds": reloads, "reload_after_seconds": reload_now,
                "floor_store_insert_seconds": insert, "floor_definitions_seconds": definitions,
                "floor_definitions_assets": assets, "uptime_after": uptime()})
            print(f"uptime after: {results['uptime_after']}", flush=True)
            if args.json:
                args.json.write_text(json.dumps(results, indent=2))
        finally:
            for process in processes:
                stop(process)
            drop_schemas(SCHEMA)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
