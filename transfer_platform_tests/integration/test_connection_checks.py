"""``transfer-platform test-connection``: one line per check, the fix of each failure, exit 1 on any.

Run as roles a provider's and a recipient's DBA would create (a PostgreSQL loader with only
``USAGE, CREATE`` on its schema, a reader with ``USAGE`` and ``SELECT`` on the model's columns, a
MariaDB reader with ``SELECT``), with one right removed at a time; the printed ``GRANT`` is then
run as printed and the check passes. Nothing is left behind: no table, no schema, no file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from transfer_platform.cli import main
from transfer_platform_tests.support.config import events_model
from transfer_platform_tests.support.events import create_events, day
from transfer_platform_tests.support.mysql import (
    MYSQL,
    mysql_connect,
    mysql_create_events,
    mysql_ident,
)
from transfer_platform_tests.support.postgres import PG, pg_connect, pg_connection_config, tables_in

pytestmark = pytest.mark.integration

TENANT = "acme"
COLUMNS = "id, organization_id, updated_at, payload"


@pytest.fixture
def role(pg_role: str) -> str:
    return pg_role


def write_config(tmp_path: Path, *, source: dict, destination: dict, model: dict | None = None) -> Path:
    path = tmp_path / "transfer_platform.yaml"
    path.write_text(json.dumps({
        "sources": [{"name": "src", **source}],
        "models": [model or events_model("events", min_start=day(2, 28))],
        "recipients": [{"name": "rcpt", "id_in_provider_system": TENANT}],
        "destinations": [{"name": "dst", "recipient": "rcpt", **destination}],
    }))
    return path


def pg_destination(schema: str, username: str | None = None, **changes) -> dict:
    connection = {**pg_connection_config(schema), **changes}
    if username:
        connection["username"] = username
    return {"vendor": "postgres", "connection": connection}


def pg_source(username: str | None = None, **changes) -> dict:
    connection = {**pg_connection_config(), **changes}
    if username:
        connection["username"] = username
    return {"vendor": "postgres", "connection": connection}


def run(capsys, config: Path, name: str) -> tuple[int, list[str]]:
    code = main(["--config", str(config), "test-connection", name])
    out = capsys.readouterr().out.strip().splitlines()
    return code, out


def outcomes(lines: list[str]) -> list[str]:
    return [line.split("  ", 1)[0] for line in lines[:-1]]


def line_with(lines: list[str], text: str) -> str:
    found = [line for line in lines if text in line]
    assert found, f"no line with {text!r} in:\n" + "\n".join(lines)
    return found[0]


def run_fix(line: str) -> None:
    """Run the GRANT(s) a failed line prints, as printed, as the administrator."""
    fix = line.split(". Fix: ", 1)[1]
    with pg_connect(autocommit=True) as conn:
        for statement in fix.split("; "):
            conn.execute(statement)


# -- PostgreSQL destination -------------------------------------------------------------------------


def test_a_loader_with_usage_and_create_passes_and_each_missing_right_is_named_with_its_grant(
        capsys, tmp_path, pg_conn, pg_schema, dst_schema, role):
    pg_conn.execute(f'CREATE SCHEMA "{dst_schema}"')
    pg_conn.execute(f'GRANT USAGE, CREATE ON SCHEMA "{dst_schema}" TO "{role}"')
    config = write_config(tmp_path, source=pg_source(), destination=pg_destination(dst_schema, role))

    code, lines = run(capsys, config, "dst")
    assert code == 0, "\n".join(lines)
    assert set(outcomes(lines)) == {"PASS"}
    for step in ("reach 127.0.0.1", "log in", "create tables", "insert, update, delete and truncate",
                 "add and drop columns", "rename tables", "drop tables", "own the model tables"):
        line_with(lines, step)
    assert tables_in(pg_conn, dst_schema) == []  # the probe table was rolled back

    pg_conn.execute(f'REVOKE CREATE ON SCHEMA "{dst_schema}" FROM "{role}"')
    code, lines = run(capsys, config, "dst")
    assert code == 1
    refused = line_with(lines, "create tables")
    assert refused.startswith("FAIL")
    assert "permission denied for schema" in refused
    assert refused.endswith(f'Fix: GRANT USAGE, CREATE ON SCHEMA "{dst_schema}" TO "{role}"')
    # what needs the probe table is not claimed; ownership does not need it
    assert outcomes(lines)[-5:] == ["SKIP"] * 4 + ["PASS"]
    assert lines[-1].endswith("1 failed, 4 skipped")

    run_fix(refused)
    assert run(capsys, config, "dst")[0] == 0


def test_a_missing_schema_passes_only_when_the_loader_may_create_it_and_is_not_created(
        capsys, tmp_path, pg_conn, dst_schema, role):
    config = write_config(tmp_path, source=pg_source(), destination=pg_destination(dst_schema, role))
    code, lines = run(capsys, config, "dst")
    assert code == 1
    refused = line_with(lines, f'create schema "{dst_schema}"')
    assert refused.startswith("FAIL")
    assert f'GRANT CREATE ON DATABASE "test" TO "{role}"' in refused

    superuser = write_config(tmp_path, source=pg_source(), destination=pg_destination(dst_schema))
    code, lines = run(capsys, superuser, "dst")
    assert code == 0, "\n".join(lines)
    assert "it does not exist yet" in line_with(lines, f'create schema "{dst_schema}"')
    assert not pg_conn.execute("SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = %s)",
                               (dst_schema,)).fetchone()[0]  # rolled back with the rest


def test_a_model_table_owned_by_another_role_is_named_with_the_owner_change(
        capsys, tmp_path, pg_conn, dst_schema, role):
    pg_conn.execute(f'CREATE SCHEMA "{dst_schema}"')
    pg_conn.execute(f'GRANT USAGE, CREATE ON SCHEMA "{dst_schema}" TO "{role}"')
    pg_conn.execute(f'CREATE TABLE "{dst_schema}".events (id bigint PRIMARY KEY)')  # the superuser's
    config = write_config(tmp_path, source=pg_source(), destination=pg_destination(dst_schema, role))
    code, lines = run(capsys, config, "dst")
    assert code == 1
    refused = line_with(lines, "own the model tables")
    assert f"owned by another role: \"{dst_schema}\".\"events\"" in refused
    assert refused.endswith(f'Fix: ALTER TABLE "{dst_schema}"."events" OWNER TO "{role}"')
    run_fix(refused)
    assert run(capsys, config, "dst")[0] == 0


def test_an_unreachable_server_fails_the_first_check_and_skips_the_rest(capsys, tmp_path, dst_schema):
    config = write_config(tmp_path, source=pg_source(port=5999), destination=pg_destination(dst_schema, port=5999))
    for name in ("dst", "src"):
        code, lines = run(capsys, config, name)
        assert code == 1
        assert lines[0].startswith("FAIL")
        assert "reach 127.0.0.1:5999" in lines[0]
        assert "Fix: check that the server" in lines[0]
        assert set(outcomes(lines)[1:]) == {"SKIP"}


# -- PostgreSQL source ---------------------------------------------------------------------------------


def test_a_reader_with_select_on_the_model_columns_only_passes_and_without_it_gets_the_grant(
        capsys, tmp_path, pg_conn, pg_schema, dst_schema, role):
    create_events(pg_conn, pg_schema)
    pg_conn.execute(f'ALTER TABLE "{pg_schema}".events ADD COLUMN secret text')  # not the model's
    model = events_model(f"{pg_schema}.events", min_start=day(2, 28))
    config = write_config(tmp_path, source=pg_source(role), destination=pg_destination(dst_schema), model=model)

    code, lines = run(capsys, config, "src")
    assert code == 1
    refused = line_with(lines, "read model 'events'")
    assert "permission denied" in refused
    assert refused.endswith(f'Fix: GRANT USAGE ON SCHEMA "{pg_schema}" TO "{role}"; GRANT SELECT ("id", '
                            f'"organization_id", "updated_at", "payload") ON "{pg_schema}"."events" TO "{role}"')
    run_fix(refused)  # column privileges: the secret column stays unreadable
    code, lines = run(capsys, config, "src")
    assert code == 0, "\n".join(lines)
    with (psycopg.connect(**{**PG, "user": role}, autocommit=True) as as_reader,
          pytest.raises(psycopg.errors.InsufficientPrivilege)):
        as_reader.execute(f'SELECT secret FROM "{pg_schema}".events')


def test_a_source_table_that_does_not_exist_is_named(capsys, tmp_path, pg_schema, dst_schema):
    model = events_model(f"{pg_schema}.missing", min_start=day(2, 28))
    config = write_config(tmp_path, source=pg_source(), destination=pg_destination(dst_schema), model=model)
    code, lines = run(capsys, config, "src")
    assert code == 1
    assert "does not exist" in line_with(lines, "read model 'events'")


# -- MariaDB source --------------------------------------------------------------------------------------


def test_a_mariadb_reader_needs_select_and_its_password(capsys, tmp_path, monkeypatch, mysql_database,
                                                        mysql_conn, dst_schema, mysql_reader):
    user, password = mysql_reader
    mysql_create_events(mysql_conn)
    monkeypatch.setenv("TP_TEST_READER_PASSWORD", password)
    source = {"vendor": "mysql", "connection": {"host": MYSQL["host"], "port": MYSQL["port"],
                                                "database": mysql_database, "username": user,
                                                "password": "${TP_TEST_READER_PASSWORD}"}}
    config = write_config(tmp_path, source=source, destination=pg_destination(dst_schema))

    code, lines = run(capsys, config, "src")
    assert code == 1
    refused = line_with(lines, "read model 'events'")
    assert "denied" in refused
    table = f"{mysql_ident(mysql_database)}.{mysql_ident('events')}"
    assert f"Fix: GRANT SELECT (`id`, `organization_id`, `updated_at`, `payload`) ON {table} TO '{user}'@" in refused

    with mysql_connect() as conn, conn.cursor() as cur:
        for host in ("%", "localhost"):
            cur.execute(f"GRANT SELECT ({COLUMNS}) ON {table} TO '{user}'@'{host}'")
    code, lines = run(capsys, config, "src")
    assert code == 0, "\n".join(lines)
    assert password not in "\n".join(lines)

    monkeypatch.setenv("TP_TEST_READER_PASSWORD", "wrong")
    code, lines = run(capsys, config, "src")
    assert code == 1
    assert "Access denied" in line_with(lines, "log in to database")
    assert outcomes(lines)[-1] == "SKIP"


# -- Delta destination and Parquet source ---------------------------------------------------------------


def as_nobody(config_path: Path, name: str) -> list[str]:
    """``test-connection`` as the unprivileged user ``nobody``, the way transfers run in production
    (this suite runs as root, whom no file permission stops): a forked child drops to nobody, then
    runs the checks. It forks rather than starts Python: nobody cannot read this interpreter."""
    import pwd

    from transfer_platform.config.loading import load_config
    from transfer_platform.transfers.connection_test import lines, run_connection_test

    config = load_config(config_path)
    import transfer_platform.destinations.delta  # noqa: F401 - loaded before dropping rights
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.close(read)
            user = pwd.getpwnam("nobody")
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            os.write(write, "\n".join(lines(run_connection_test(config, name))).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as out:
        text = out.read()
    os.waitpid(pid, 0)
    return text.splitlines()


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder everyone may enter and read but only root may write (pytest's tmp_path is root's
    alone)."""
    folder = Path(tempfile.mkdtemp(prefix="tp_probe_"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_delta_folder_the_transfer_user_cannot_write_is_named_and_nothing_is_left(
        tmp_path, capsys, shared_folder):
    lake = tmp_path / "lake"
    (lake / "events").mkdir(parents=True)
    tables = shared_folder / "tables"
    config = write_config(tmp_path, source={"vendor": "parquet", "connection": {"path": str(lake)}},
                          destination={"vendor": "delta", "connection": {"path": str(tables)}})
    code, lines = run(capsys, config, "dst")  # as root, who may write there
    assert code == 0, "\n".join(lines)
    assert "it does not exist yet" in line_with(lines, "create folder")
    assert list(shared_folder.iterdir()) == []  # the folder made for the probe is removed again

    lines = as_nobody(config, "dst")
    refused = line_with(lines, "create folder")
    assert refused.startswith("FAIL"), "\n".join(lines)
    assert "Permission denied" in refused
    assert f"Fix: let the user transfers run as (nobody) create, write and delete in {shared_folder}" in refused

    tables.mkdir()  # there, but not nobody's: every file operation is refused
    lines = as_nobody(config, "dst")
    assert line_with(lines, "create folder").startswith("PASS")
    refused = line_with(lines, f"write, rename, read and delete files and folders in {tables}")
    assert refused.startswith("FAIL")
    assert "Permission denied" in refused
    os.chown(tables, pwd_uid("nobody"), -1)
    lines = as_nobody(config, "dst")
    assert lines[-1].endswith("0 failed"), "\n".join(lines)
    assert list(tables.iterdir()) == []


def pwd_uid(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_uid


def test_a_parquet_table_without_the_model_columns_is_named(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    lake = tmp_path / "lake"
    (lake / "events").mkdir(parents=True)
    pq.write_table(pa.table({"id": [1], "organization_id": ["acme"], "payload": ["x"]}),
                   lake / "events" / "part-0.parquet")
    config = write_config(tmp_path, source={"vendor": "parquet", "connection": {"path": str(lake)}},
                          destination={"vendor": "delta", "connection": {"path": str(tmp_path / "out")}})
    code, lines = run(capsys, config, "src")
    assert code == 1
    assert "lack the column(s) updated_at" in line_with(lines, "read model 'events'")


def test_an_unknown_name_is_a_configuration_error(tmp_path, capsys, dst_schema):
    config = write_config(tmp_path, source=pg_source(), destination=pg_destination(dst_schema))
    assert main(["--config", str(config), "test-connection", "nope"]) == 2
    assert "no source or destination named 'nope'; configured: dst, src" in capsys.readouterr().err


# -- the same check in Dagster ------------------------------------------------------------------------


def test_the_dagster_job_logs_each_check_and_fails_naming_the_grant(tmp_path, pg_conn, dst_schema, role):
    import dagster as dg

    from transfer_platform.definitions import build_definitions

    pg_conn.execute(f'CREATE SCHEMA "{dst_schema}"')
    pg_conn.execute(f'GRANT USAGE ON SCHEMA "{dst_schema}" TO "{role}"')  # no CREATE
    config = write_config(tmp_path, source=pg_source(), destination=pg_destination(dst_schema, role))
    defs = build_definitions(str(config))
    defs.get_repository_def().load_all_definitions()  # as a code server loads it: names are unique
    job = defs.get_job_def("test_connection")
    run_config = {"ops": {"check_connection": {"config": {"name": "dst"}}}}
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(run_config=run_config, instance=instance, raise_on_error=False)
        assert not result.success
        logged = [e.message for e in instance.all_logs(result.run_id) if e.message]
        (failure,) = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert any(m.startswith("PASS  destination 'dst': log in") for m in logged)
    assert any(m.startswith("FAIL  destination 'dst': create tables") for m in logged)
    description = failure.step_failure_data.user_failure_data.description
    assert f'Fix: GRANT USAGE, CREATE ON SCHEMA "{dst_schema}" TO "{role}"' in description

    pg_conn.execute(f'GRANT CREATE ON SCHEMA "{dst_schema}" TO "{role}"')
    with dg.instance_for_test() as instance:
        assert job.execute_in_process(run_config=run_config, instance=instance).success
