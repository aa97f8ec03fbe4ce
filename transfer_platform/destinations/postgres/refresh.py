"""A full refresh: loaded like any window into a table built aside (``_tp_refresh_<model hash>``),
its progress in ``_transfer_status.refresh_state``; once complete, one transaction publishes it and
moves the watermark.

When nothing depends on the live table's identity (the empty-target fast path's check: no view,
foreign key, trigger, extra index, policy, publication, comment, grant or owner of its own; and
the aside table's columns and key exactly the live table's), the aside table is analyzed, both
tables are locked (waiting at most ``Tuning.lock_wait_seconds`` for the live table's readers,
else refused with nothing changed), the live table is dropped and the aside table and its key
renamed into its place: every row is written once. With no live table yet, the aside table is
renamed into its place. When something does depend on it, the live table is truncated and
refilled from the aside table (merged into, when another table's foreign key references it:
``TRUNCATE`` refuses that), its identity (OID) kept, so its views, foreign keys, grants and
triggers survive. When its columns no longer match the model, it is dropped and replaced by the
aside table (refused, naming the fix, if a view depends on it). Until that commit readers see the
old table whole; a crash before it changes nothing. An unfinished refresh is carried on by the
next transfer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.postgres import sql
from transfer_platform.errors import DataError, SchemaMismatch, TransferRunning

if TYPE_CHECKING:
    import psycopg

    from transfer_platform.config.models import ModelConfig
    from transfer_platform.tuning import Tuning


class Refresh:
    """The table built aside and its publish (a mixin of ``PostgresWriter``)."""

    conn: psycopg.Connection
    name: str
    tuning: Tuning

    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        """A new, empty table aside; progress starts over (the live high watermark is kept as
        the reference of ``delta_rows_transferred``)."""
        state = ModelState(high_watermark=live.high_watermark)
        aside = self.refresh_table(model)
        with self.conn.transaction():
            self.conn.execute(sql.drop_table(aside))
            self.conn.execute(sql.target_ddl(aside, model))
            self._ensure_status_row(model)
            self._record_refresh_state(model, state)
        return state

    @contextmanager
    def _publishing(self) -> Iterator[None]:
        with self._translated_errors(), self.conn.transaction():
            yield

    def _refresh_state(self, model: ModelConfig) -> ModelState:
        return self._lock_state(model, "refresh_state")

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        live, aside = self.table(model), self.refresh_table(model)
        if not self._columns_match(model, live):  # a new shape, or no live table yet
            self._replace_live_table(model)
        elif not (self._swappable(live, aside) and self._swap_refresh(model)):
            self._refill_live_table(model)
        self._record_state(model, state, transfer_id)
        self._record_refresh_state(model, None)

    def _swappable(self, live: str, aside: str) -> bool:
        """The aside table can replace the live one and nothing is lost: the fast path's check
        (dependents, owner, grants, options, columns in order) and the same primary key."""
        return self._replaceable(live, aside) and bool(self.conn.execute(sql.SAME_PRIMARY_KEY, (live, aside)).fetchone()[0])

    def _swap_refresh(self, model: ModelConfig) -> bool:
        """Publish the complete aside table by replacing the live one, in the current transaction:
        the aside table is analyzed (readers' plans get statistics at once), both tables are
        locked, waiting at most ``Tuning.lock_wait_seconds`` for the live table's readers (refused
        after that, nothing changed), the check is made again under the lock, the live table
        dropped and the aside table and its key renamed into its place. False, with the lock held
        and nothing else changed (but the aside table's statistics), if something came to depend
        on the live table meanwhile: the caller refills it instead."""
        import psycopg

        conn = self.conn
        live, aside = self.table(model), self.refresh_table(model)
        wait = self.tuning.lock_wait_seconds
        conn.execute(sql.analyze(aside))  # before the lock: readers are not kept waiting for it
        conn.execute(sql.lock_timeout(wait))
        try:
            with conn.transaction():
                conn.execute(sql.lock_exclusive(live, aside))
        except psycopg.errors.LockNotAvailable:
            raise TransferRunning(
                f"model '{model.model_name}' -> destination '{self.name}': the full refresh is "
                f"complete but was not published: other sessions kept {live} in use for "
                f"{wait:g} s (publishing needs it alone for a moment). Nothing changed: "
                "readers still see the old table, and the refresh built aside is kept. Fix: run the "
                "transfer again once the long queries on the table have ended; it publishes the "
                "refresh") from None
        if not self._swappable(live, aside):
            return False
        try:
            with conn.transaction():
                conn.execute(sql.drop_table(live, if_exists=False))
        except psycopg.errors.DependentObjectsStillExist:
            return False
        self._rename_into(aside, model.model_name)
        return True

    def _refill_live_table(self, model: ModelConfig) -> None:
        """Something depends on the live table's identity: its rows are replaced, not it. Truncated
        and refilled; merged (rows deleted, inserted, updated) when another table's foreign key
        references it, since ``TRUNCATE`` refuses that: a row the refresh removes but a referencing
        row still needs is refused by the key (nothing published), or follows its ``ON DELETE``."""
        import psycopg

        conn = self.conn
        live, aside = self.table(model), self.refresh_table(model)
        columns = [c.destination_name for c in model.columns]
        (referenced,) = conn.execute(sql.REFERENCED_BY_ANOTHER_TABLE, (live,)).fetchone()
        if not referenced:
            for statement in sql.copy_into_live(live, aside, columns):
                conn.execute(statement)
            return
        try:
            for statement in sql.merge_into_live(live, aside, columns, [c.destination_name for c in model.primary_key]):
                conn.execute(statement)
        except psycopg.errors.ForeignKeyViolation as exc:
            raise DataError(
                f"the full refresh removes rows of {live} that another table's foreign key still "
                f"references ({exc.diag.message_detail or exc.diag.message_primary}); nothing was "
                "published, the refresh built aside is kept",
                model=model.model_name, destination=self.name,
                fix="delete or repoint the referencing rows (or give the foreign key ON DELETE CASCADE "
                    "or SET NULL), then run the transfer again: it publishes the refresh") from None

    def _replace_live_table(self, model: ModelConfig) -> None:
        import psycopg

        conn = self.conn
        try:
            conn.execute(sql.drop_table(self.table(model)))
        except psycopg.errors.DependentObjectsStillExist:
            raise SchemaMismatch(
                f"model '{model.model_name}' -> destination '{self.name}': the full refresh changes "
                f"the columns of {self.table(model)}, which must be replaced, but views or other "
                "objects depend on it. Fix: drop them, run the transfer again (the refresh built so "
                "far is kept), then recreate them"
            ) from None
        self._rename_into(self.refresh_table(model), model.model_name)
