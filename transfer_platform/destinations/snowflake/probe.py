"""``test-connection`` of a Snowflake destination: log in, find the schema, then everything a
transfer does in it, tried on probe objects dropped at once; a refused step names its GRANT."""

from __future__ import annotations

import tempfile
import uuid
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from transfer_platform.destinations.snowflake.connect import first_line, quote
from transfer_platform.errors import ConfigError, ConnectionFailure, MissingPrivilege

if TYPE_CHECKING:
    from transfer_platform.destinations.snowflake.writer import SnowflakeWriter
    from transfer_platform.probes import Check


def probe_steps(writer: SnowflakeWriter, name: str, parquet: Path) -> list[tuple[str, str, list[str]]]:
    """(check, the grant it needs, statements), in the order they depend on each other."""
    c, d, stage = writer.destination.connection, writer.dialect, writer.stage
    role, warehouse, schema = quote(c.role or "<the user's role>"), quote(c.warehouse), f"{quote(c.database)}.{quote(c.schema_)}"
    table, staging, loaded = (d.qualified(c.schema_, name + suffix) for suffix in ("", "_s", "_l"))
    return [
        ("use the warehouse (run queries)", f"GRANT USAGE ON WAREHOUSE {warehouse} TO ROLE {role}",
         [f"USE WAREHOUSE {warehouse}", "SELECT 1"]),
        ("create tables (model, status, lock and staging tables)",
         f"GRANT USAGE ON DATABASE {quote(c.database)} TO ROLE {role}; GRANT USAGE, CREATE TABLE ON SCHEMA "
         f"{schema} TO ROLE {role}",
         [f"CREATE TABLE {table} (id NUMBER(38,0), v VARCHAR, PRIMARY KEY (id))",
          f"CREATE TRANSIENT TABLE {staging} (id NUMBER(38,0), v VARCHAR)"]),
        ("create the stage _tp_stage", f"GRANT CREATE STAGE ON SCHEMA {schema} TO ROLE {role}", [d.stage_ddl(stage)]),
        ("insert, read, update and delete rows (merge, state)", "the role owns the tables it creates: check "
         "that no future grant or managed access removes its ownership",
         [f"INSERT INTO {staging} (id, v) VALUES (1, 'a')", f"INSERT INTO {table} (id, v) SELECT id, v FROM {staging}",
          f"UPDATE {table} AS t SET v = s.v FROM {staging} AS s WHERE t.id = s.id",
          f"DELETE FROM {table} AS t USING {staging} AS s WHERE t.id = s.id"]),
        ("add and drop columns (schema evolution)", "the role must own the model's tables",
         [f"ALTER TABLE {table} ADD COLUMN w VARCHAR", f"ALTER TABLE {table} DROP COLUMN w"]),
        ("drop tables (staging, full refresh)", "the role must own the tables", [d.drop_table(staging, if_exists=False)]),
        ("stage a Parquet file (PUT) and load it (COPY INTO)",
         f"GRANT READ, WRITE ON STAGE {stage} TO ROLE {quote(c.role or '<the user role>')} (if another role created "
         "the stage)", [f"CREATE TRANSIENT TABLE {loaded} (id NUMBER(38,0))", d.put(str(parquet), stage, name),
                        d.copy_into(loaded, stage, name)]),
    ]


def probe_destination(writer: SnowflakeWriter, target: str) -> list[Check]:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import snowflake.connector

    from transfer_platform.destinations.snowflake.connect import connect
    from transfer_platform.probes import Probe

    probe, c = Probe(target), writer.destination.connection
    name = "_tp_probe_" + uuid.uuid4().hex[:12]
    with tempfile.TemporaryDirectory(prefix="tp_sf_probe_") as tmp:
        pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), Path(tmp) / "probe.parquet")
        steps = probe_steps(writer, name, Path(tmp) / "probe.parquet")
        login, schema_step = f"log in to account {c.account!r} as {c.user!r}", f"find schema {c.database}.{c.schema_}"
        try:
            conn = writer._conn = connect(writer.destination, writer.what)
        except (ConnectionFailure, ConfigError) as exc:
            probe.failed(login, getattr(exc, "reason", None) or str(exc).splitlines()[-1].strip(),
                         "check account, host, user and the password's (or private_key's) environment variable")
            probe.skipped([schema_step, *(s for s, _, _ in steps)], "cannot log in")
            return probe.checks
        probe.passed(login)
        try:
            writer._use_schema()
            probe.passed(schema_step)
            with conn.cursor() as cursor:
                for index, (step, grant, statements) in enumerate(steps):
                    try:
                        for statement in statements:
                            cursor.execute(statement)
                    except snowflake.connector.errors.Error as exc:
                        probe.failed(step, first_line(exc), grant)
                        probe.skipped([s for s, _, _ in steps[index + 1:]], "the step before failed")
                        break
                    probe.passed(step)
        except MissingPrivilege as exc:
            probe.failed(schema_step, str(exc).split(" (", 1)[-1].split(")")[0], exc.grant)
            probe.skipped([s for s, _, _ in steps], "the schema is not there")
        finally:
            with conn.cursor() as cursor:
                for suffix in ("", "_s", "_l"):
                    with suppress(snowflake.connector.errors.Error):  # reported by the step that failed
                        cursor.execute(writer.dialect.drop_table(writer.dialect.qualified(c.schema_, name + suffix)))
            writer.close()
    return probe.checks
