"""A Snowflake emulator for the warehouses benchmark and the tests
(``transfer_platform_tests/support/snowflake_server.py``): fakesnow's server (``fakesnow[server]``: Snowflake's REST
protocol over HTTP, DuckDB underneath) started as its own process on 127.0.0.1 and stopped
afterwards. Its databases are in memory, one set shared by every connection, kept while the
process lives (a transfer killed with -9 leaves them). Nothing patches the connector: requests go
over HTTP to this process.

One answer of fakesnow's is made Snowflake's (:func:`serve`): a statement that breaks a constraint
(a NULL into a ``NOT NULL`` column, which Snowflake enforces; a key twice, which DuckDB enforces
and Snowflake does not) fails with the connector's ``ProgrammingError`` 100072, as Snowflake's
"NULL result in a non-nullable column" does, where fakesnow answered HTTP 500, which the connector
retries for minutes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.spark_server import free_port, listening, stop, wait_for

#: fakesnow accepts any account, user and password
ACCOUNT, USER, PASSWORD = "fakesnow", "fake", "snow"


@dataclass(frozen=True)
class FakeSnowflake:
    host: str
    port: int
    log: Path

    def connect(self, **extra):
        """A connector session of the tests (the recipient's, or the administrator's)."""
        import snowflake.connector

        return snowflake.connector.connect(
            account=ACCOUNT, user=USER, password=PASSWORD, host=self.host, port=self.port, protocol="http",
            login_timeout=10, session_parameters={"CLIENT_OUT_OF_BAND_TELEMETRY_ENABLED": False}, **extra)

    def create_schema(self, database: str, schema: str) -> None:
        with self.connect() as conn, conn.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE IF NOT EXISTS "{database}"')
            cursor.execute(f'CREATE SCHEMA IF NOT EXISTS "{database}"."{schema}"')

    def connection(self, database: str, schema: str, password_env: str) -> dict:
        """A destination's ``connection`` block pointing at this emulator."""
        return {"account": ACCOUNT, "user": USER, "password": f"${{{password_env}}}", "database": database,
                "schema": schema, "warehouse": "TP_WH", "host": self.host, "port": self.port, "protocol": "http"}


@contextmanager
def fakesnow_server(folder: Path) -> Iterator[FakeSnowflake]:
    """fakesnow's server on a free loopback port, yielded once it accepts connections."""
    port = free_port()
    log = folder / "fakesnow.log"
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "benchmarks.snowflake_server", "-s", "--host", "127.0.0.1",
                                    "--port", str(port)],
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(process, log, "fakesnow", lambda: listening(port))
        yield FakeSnowflake("127.0.0.1", port, log)
    finally:
        stop(process)


def serve(argv: list[str]) -> int:
    """fakesnow's command line (``-s --host H --port N``), its constraint errors answered as
    Snowflake answers them (see the module's docstring)."""
    import duckdb
    import snowflake.connector.errors
    from fakesnow import cli, cursor

    execute = cursor.FakeSnowflakeCursor._execute

    def answered(self, *args, **kwargs):
        try:
            return execute(self, *args, **kwargs)
        except duckdb.ConstraintException as exc:
            raise snowflake.connector.errors.ProgrammingError(
                msg=str(exc.args[0]).split("\n")[0], errno=100072, sqlstate="22000") from exc

    cursor.FakeSnowflakeCursor._execute = answered
    return cli.main(argv)


if __name__ == "__main__":
    raise SystemExit(serve(sys.argv[1:]))
