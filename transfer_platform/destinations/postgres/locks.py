"""A model's lock in the destination database: a session advisory lock."""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.destinations.postgres import sql
from transfer_platform.errors import TransferRunning

if TYPE_CHECKING:
    import psycopg

    from transfer_platform.config.models import ModelConfig
    from transfer_platform.tuning import Tuning
    from transfer_platform.vendors.postgres import PostgresDestination


class Locks:
    """The models' locks this writer's session holds (a mixin of ``PostgresWriter``)."""

    conn: psycopg.Connection
    destination: PostgresDestination
    name: str
    schema: str
    tuning: Tuning
    _locked: set[int]

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """Hold the model's lock in the destination itself (a session advisory lock, released when
        the writer's connection closes, or when its process dies): two transfers of one model to
        one destination never interleave, however they were started (two ``transfer`` commands,
        ``materialize()`` in two processes), and the staging tables of the model left behind can
        only be a dead transfer's. A second transfer waits up to ``Tuning.lock_wait_seconds``,
        then is refused, naming the first."""
        import psycopg

        key = sql.model_lock_key(self.destination.connection.database, self.schema, model.model_name)
        if key in self._locked:
            return
        conn = self.conn
        conn.execute("SELECT set_config('application_name', %s, false)", (f"transfer_platform {transfer_id}"[:63],))
        try:
            # wait a little: a killed transfer's session ends a moment after its process
            with conn.transaction():
                conn.execute(sql.lock_timeout(self.tuning.lock_wait_seconds))
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
        except psycopg.errors.LockNotAvailable:
            holder = conn.execute(
                sql.ADVISORY_LOCK_HOLDER,
                ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()
            who = (f"{holder[0] or 'a session'}, connected since {holder[1]:%Y-%m-%d %H:%M:%S}"
                   if holder else "a session that has just ended")
            raise TransferRunning(
                f"model '{model.model_name}' -> destination '{self.name}': another transfer of this "
                f"model to this destination is running ({who}); two transfers never write one "
                "table at once. Fix: wait for it to end, or cancel it (transfer-platform cancel "
                "TRANSFER_ID), then run this one again; transfers queued through Dagster wait for "
                "each other by themselves") from None
        self._locked.add(key)
