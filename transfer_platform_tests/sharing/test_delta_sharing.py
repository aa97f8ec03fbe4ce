"""Delta Sharing end to end: the real API served by uvicorn on a free port, a shared Delta
destination in a folder filled by real transfers (backfill, incremental, a soft delete, a full
refresh), read by the official ``delta-sharing`` client (its own venv, scripts/sharing-client) as a
subprocess; another recipient's token, wrong, expired and revoked tokens, and our signed file URLs
refused."""

from __future__ import annotations

import json
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
import yaml

from transfer_platform.config.parsing import parse_config
from transfer_platform.sharing.tables import Location, folder_file, sign
from transfer_platform.store.api_keys import create_key
from transfer_platform.store.database import migrate
from transfer_platform.store.tables import audit_log, sharing_tokens
from transfer_platform_tests.support.config import events_model
from transfer_platform_tests.support.events import day
from transfer_platform_tests.support.postgres import pg_connection_config
from transfer_platform_tests.support.processes import free_port
from transfer_platform_tests.support.transfers import transfer

pytestmark = pytest.mark.integration

CLIENT = Path(__file__).resolve().parents[2] / "scripts" / "sharing-client" / ".venv" / "bin" / "python"
ACME, GLOBEX = "org-acme", "org-globex"
MIN_START = day(2, 28)
SCHEMA = pa.schema([("id", pa.int64()), ("organization_id", pa.string()), ("updated_at", pa.timestamp("us", tz="UTC")),
                    ("payload", pa.string()), ("deleted", pa.bool_())])

#: the client's side: each command a JSON line on stdout
READ = """
import json, sys, delta_sharing
profile, url, limit = sys.argv[1], sys.argv[2], sys.argv[3]
client = delta_sharing.SharingClient(profile)
out = {"tables": sorted(f"{t.share}.{t.schema}.{t.name}" for t in client.list_all_tables())}
try:
    frame = delta_sharing.load_as_pandas(f"{profile}#{url}", limit=int(limit) if limit else None)
    out["rows"] = sorted([int(r.id), r.organization_id, r.payload] for r in frame.itertuples())
except Exception as exc:
    out["error"] = type(exc).__name__ + ": " + str(exc).splitlines()[0]
try:
    delta_sharing.load_table_changes_as_pandas(f"{profile}#{url}", starting_version=0)
except Exception as exc:
    out["changes_error"] = str(exc)
print(json.dumps(out))
"""


def write_lake(lake: Path, rows: list[tuple]) -> None:
    folder = lake / "events"
    for old in folder.glob("*.parquet"):
        old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], schema=SCHEMA),
                   folder / f"part-{datetime.now(UTC).timestamp():.6f}.parquet")


def expected(rows: list[tuple], tenant: str) -> list[list]:
    return sorted([r[0], r[1], r[3]] for r in rows if r[1] == tenant and not r[4])


class Served:
    """``create_app`` under uvicorn in a thread of the test's process, on 127.0.0.1:``port``."""

    def __init__(self, config_path: Path, port: int) -> None:
        import uvicorn

        from transfer_platform.api.app import create_app

        self.app = create_app(config_path)
        migrate(self.app.state.store.settings.connection)
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> Served:
        self.thread.start()
        for _ in range(2400):  # started: uvicorn listens (no fixed sleep: the thread's join is the wait)
            if self.server.started or not self.thread.is_alive():
                break
            self.thread.join(0.05)
        assert self.server.started, "uvicorn did not start"
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture
def platform(tmp_path: Path, store_schema: str, secret_key: str):
    port = free_port()
    document = {
        "store": {"connection": pg_connection_config(store_schema)},
        "api": {"public_url": f"http://127.0.0.1:{port}"},
        "sources": [{"name": "src", "vendor": "parquet", "connection": {"path": str(tmp_path / "lake")}}],
        "models": [{**(model := events_model("events", min_start=MIN_START)),
                    "columns": [*model["columns"],
                                {"name_in_source": "deleted", "data_type": "boolean", "is_deleted_marker": True}]}],
        "recipients": [{"name": "acme", "id_in_provider_system": ACME},
                       {"name": "globex", "id_in_provider_system": GLOBEX}],
        "destinations": [{"name": name, "vendor": "delta", "recipient": name, "sharing": {"enabled": True},
                          "connection": {"path": str(tmp_path / name)}} for name in ("acme", "globex")],
    }
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    config = parse_config(document, now=datetime(2024, 6, 1, tzinfo=UTC))
    with Served(path, port) as served:
        yield served, config, tmp_path


def read(profile: Path, url: str, limit: int | None = None) -> dict:
    done = subprocess.run([str(CLIENT), "-c", READ, str(profile), url, str(limit or "")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_recipient_reads_its_tables_with_the_official_client(spark, platform) -> None:
    served, config, root = platform
    engine = served.app.state.store.engine
    _, key = create_key(engine, "tests")
    admin = httpx.Client(base_url=served.url, headers={"X-API-KEY": key}, timeout=120)
    profiles = {}
    for recipient in ("acme", "globex"):
        answer = admin.post(f"/recipients/{recipient}/sharing-token", json={"expires_in_days": 1})
        assert answer.status_code == 201, answer.text
        profile = answer.json()["data"]["profile"]
        assert set(profile) == {"shareCredentialsVersion", "endpoint", "bearerToken", "expirationTime"}
        profiles[recipient] = root / f"{recipient}.share"
        profiles[recipient].write_text(json.dumps(profile))
    assert admin.post("/recipients/acme/sharing-token", json={}).status_code == 409  # one per recipient
    url = "acme.default.events"

    # a backfill
    rows = [(k, tenant, day(3, 1 + k % 3) + timedelta(minutes=k), f"v1 {k}", False)
            for k in range(1, 41) for tenant in ([ACME] if k % 2 else [GLOBEX])]
    write_lake(root / "lake", rows)
    assert transfer(spark, config, day(3, 4), destination="acme").status == "SUCCESS"
    got = read(profiles["acme"], url)
    assert got["tables"] == ["acme.default.events"]
    assert got["rows"] == expected(rows, ACME)
    assert "change data feed" in got["changes_error"]

    # an incremental: rows changed and added, one marked deleted
    rows = [(r[0], r[1], day(3, 4) + timedelta(hours=1, minutes=r[0]), f"v2 {r[0]}", r[0] == 3) if r[0] in (1, 3, 5)
            else r for r in rows] + [(101, ACME, day(3, 4) + timedelta(hours=2), "new", False)]
    write_lake(root / "lake", rows)
    assert transfer(spark, config, day(3, 5), destination="acme", transfer_id="t2").status == "SUCCESS"
    got = read(profiles["acme"], url)
    assert got["rows"] == expected(rows, ACME)
    assert [3, ACME, "v2 3"] not in got["rows"]
    assert [1, ACME, "v2 1"] in got["rows"]

    # a full refresh of a lake that lost rows
    rows = [r for r in rows if r[0] not in (7, 9)]
    write_lake(root / "lake", rows)
    assert transfer(spark, config, day(3, 6), destination="acme", transfer_id="t3", full_refresh=True).status == "SUCCESS"
    got = read(profiles["acme"], url, limit=5)
    assert len(got["rows"]) == 5
    assert read(profiles["acme"], url)["rows"] == expected(rows, ACME)

    # another recipient's token: its own share only, and acme's table is not found
    other = read(profiles["globex"], url)
    assert other["tables"] == ["globex.default.events"]
    assert "404" in other["error"]

    # every route with globex's token on acme's share: 404, no URL, nothing about it
    globex_token = json.loads(profiles["globex"].read_text())["bearerToken"]
    acme_token = json.loads(profiles["acme"].read_text())["bearerToken"]
    table = "/delta-sharing/shares/acme/schemas/default/tables/events"
    routes = [("GET", "/delta-sharing/shares/acme"), ("GET", "/delta-sharing/shares/acme/schemas"),
              ("GET", "/delta-sharing/shares/acme/schemas/default/tables"),
              ("GET", "/delta-sharing/shares/acme/all-tables"), ("GET", f"{table}/version"),
              ("HEAD", f"{table}/version"), ("GET", f"{table}/metadata"), ("POST", f"{table}/query"),
              ("GET", f"{table}/changes?startingVersion=0")]
    sharing = httpx.Client(base_url=served.url, timeout=120)
    nowhere = sharing.request("GET", "/delta-sharing/shares/no_such_share",
                              headers={"Authorization": f"Bearer {globex_token}"})
    for method, path in routes:
        answer = sharing.request(method, path, headers={"Authorization": f"Bearer {globex_token}"},
                                 json={} if method == "POST" else None)
        assert answer.status_code == 404, (method, path, answer.text)
        assert "url" not in answer.text
        assert "Delta-Table-Version" not in answer.headers
        if method == "GET" and path.endswith("/acme"):
            assert answer.json()["errorCode"] == nowhere.json()["errorCode"]  # the same as a share that is none

    # the right token: a query's files are URLs of ours, signed and expiring, and audited
    answer = sharing.post(f"{table}/query", json={"predicateHints": ["id > 3"]},
                          headers={"Authorization": f"Bearer {acme_token}"})
    assert answer.status_code == 200, answer.text
    version = int(answer.headers["Delta-Table-Version"])
    file_urls = [json.loads(line)["file"]["url"] for line in answer.text.splitlines()[2:]]
    assert file_urls
    assert all(u.startswith(f"{served.url}/delta-sharing/files/acme/events/") for u in file_urls)
    assert sharing.get(file_urls[0]).status_code == 200
    parsed = urlparse(file_urls[0])
    path = parsed.path.removeprefix("/delta-sharing/files/")
    past = int(datetime.now(UTC).timestamp()) - 1
    expired = sharing.get(parsed.path, params={"expires": past, "sig": sign(path, past)})
    assert expired.status_code == 403
    assert "expired" in expired.json()["message"]
    later = int(parse_qs(parsed.query)["expires"][0]) + 3600  # a later expiry with the old signature
    forged = sharing.get(parsed.path, params={"expires": later, "sig": parse_qs(parsed.query)["sig"][0]})
    assert forged.status_code == 403
    climbing = sharing.get("/delta-sharing/files/acme/events/../../globex/x.parquet",
                           params={"expires": later, "sig": sign("acme/events/../../globex/x.parquet", later)})
    assert climbing.status_code in (403, 404)  # the client may normalise the path: refused either way
    location = Location.of(config.destination("acme"))
    assert folder_file(location, "events", "../../globex/events/x.parquet") is None
    assert folder_file(location, "events", "_delta_log/00000000000000000000.json") is None
    assert folder_file(location, "events", urlparse(file_urls[0]).path.rsplit("/", 1)[1]) is not None
    with engine.connect() as conn:
        entry = conn.execute(sa.select(audit_log).where(audit_log.c.action == "query")
                             .order_by(audit_log.c.id.desc())).first()
    assert entry.resource_id == "acme.default.events"
    assert entry.resource_name == "acme"
    assert entry.changes["version"]["to"] == version
    assert entry.changes["files"]["to"] == len(file_urls)
    assert entry.changes["rows"]["to"] == len(expected(rows, ACME))

    # wrong, revoked, expired tokens: 401 and nothing else
    rotated = admin.post("/recipients/acme/sharing-token/rotate", json={})
    assert rotated.status_code == 201
    new_token = rotated.json()["data"]["profile"]["bearerToken"]
    listed = admin.get("/sharing-tokens", params={"recipient": "acme"}).json()["data"]["sharing_tokens"]
    assert [t["revoked_at"] is None for t in listed] == [True, False]
    assert new_token not in json.dumps(listed)
    with engine.begin() as conn:
        conn.execute(sa.update(sharing_tokens).where(sharing_tokens.c.recipient == "globex")
                     .values(expires_at=sa.func.now() - timedelta(seconds=1)))
    for token in ("tpds_wrong", acme_token, globex_token, None):
        answer = sharing.get("/delta-sharing/shares", headers={"Authorization": f"Bearer {token}"} if token else {})
        assert answer.status_code == 401, token
        assert answer.json() == {"errorCode": "UNAUTHENTICATED",
                                 "message": "missing, wrong, expired or revoked bearer token"}
    answer = sharing.get("/delta-sharing/shares", headers={"Authorization": f"Bearer {new_token}"})
    assert [s["name"] for s in answer.json()["items"]] == ["acme"]
    assert admin.delete("/recipients/acme/sharing-token").status_code == 200
    assert sharing.get("/delta-sharing/shares", headers={"Authorization": f"Bearer {new_token}"}).status_code == 401
