"""A staged window's one commit: in one transaction the model's status row is locked, the batch
merged on the primary key (never replacing a row by an older one; an ``is_append_only`` model
only inserts: ``ON CONFLICT DO NOTHING``), its soft deletes applied, and the new state recorded.
A crash before COMMIT leaves the target and the watermark as they were.

The empty-target fast path: when the target is empty and nothing depends on it, the loaded
staging table *becomes* it (its primary key built, the empty target dropped, the staging table
renamed): every row is written once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.core.sql import marked_deleted, plan_soft_delete, plan_upsert, qualified
from transfer_platform.destinations.base import WindowLoad, WindowResult
from transfer_platform.destinations.postgres import sql

if TYPE_CHECKING:
    import psycopg

    from transfer_platform.destinations.postgres.staging import StagingTable


class Merge:
    """The window's commit (a mixin of ``PostgresWriter``)."""

    conn: psycopg.Connection
    schema: str

    def _commit(self, staging: StagingTable | None, load: WindowLoad) -> WindowResult:
        model = load.model
        conn = self.conn
        with self._translated_errors(), conn.transaction():
            state = self._lock_state(model, "refresh_state" if load.into_refresh else "state")
            if staging is None:  # a window of no rows: its state alone
                rows = delta_rows = volume = rows_deleted = 0
                max_lm = None
            else:
                rows, delta_rows, volume = staging.rows, staging.delta_rows, staging.volume
                max_lm, rows_deleted = staging.max_last_modified, staging.marked
                rows_deleted = self._merge(load, staging, rows_deleted)
            new_state = state.after_window(
                load.progress, batch_max_last_modified=max_lm, configured_start=load.configured_start
            )
            if load.into_refresh:
                self._record_refresh_state(model, new_state)
            else:
                self._record_state(model, new_state, load.transfer_id)
        return WindowResult(rows, delta_rows, volume, max_lm, new_state, rows_deleted)

    def _merge(self, load: WindowLoad, staging: StagingTable, rows_deleted: int) -> int:
        """The staged rows into the target, in the current transaction; the rows deleted."""
        model = load.model
        conn = self.conn
        marker, skip = model.deletion_marker, None
        if model.removes_deleted_rows:  # rows marked deleted are removed, never inserted
            skip, rows_deleted = marked_deleted(marker.destination_name, marker.data_type), 0
            if staging.swappable:  # an empty target: nothing to remove, and the staging table becomes it
                conn.execute(sql.delete_where(staging.table, skip))
        if staging.swappable and self._swap_in(load, staging):
            return rows_deleted
        self._refuse_duplicate_keys(load, staging)
        primary_key = [c.destination_name for c in model.primary_key]
        if skip:
            rows_deleted = conn.execute(plan_soft_delete(
                target=staging.target, staging=staging.table, primary_key=primary_key,
                last_modified=model.last_modified.destination_name,
                marker=marker.destination_name, marker_type=marker.data_type)).rowcount
        conn.execute(plan_upsert(
            target=staging.target, staging=staging.table,
            columns=[c.destination_name for c in model.columns],
            primary_key=primary_key,
            last_modified=model.last_modified.destination_name,
            append_only=model.is_append_only,  # a key already delivered is skipped
            skip=skip,
        ))
        return rows_deleted

    # -- the empty-target fast path ------------------------------------------------------------

    def _is_empty(self, table: str) -> bool:
        return self.conn.execute(sql.is_empty(table)).fetchone()[0]

    def _replaceable(self, target: str, staging: str) -> bool:
        """Nothing would be lost by replacing ``target`` with ``staging`` (the empty-target fast
        path, a full refresh's publish): no index but the primary key, no trigger, view, foreign
        key, check, default, policy, publication, rule or comment on it, nothing using its row
        type; the same owner, grants, storage options, persistence, replica identity and row
        security as ``staging``; the same columns in the same order (type, collation, NOT NULL,
        column grants, statistics settings)."""
        (extra,) = self.conn.execute(sql.DEPENDENTS_BUT_THE_KEY, {"t": target}).fetchone()
        if extra:
            return False
        (alike,) = self.conn.execute(sql.SAME_OWNER_GRANTS_AND_OPTIONS, (target, staging)).fetchone()
        return bool(alike) and bool(self.conn.execute(sql.SAME_COLUMNS, (target, staging)).fetchone()[0])

    def _swap_in(self, load: WindowLoad, staging: StagingTable) -> bool:
        """Make the loaded staging table the target, in the current transaction: its primary key
        is built (a duplicate key is refused by name), the empty target dropped, the staging table
        renamed. False, with nothing changed, if the target is no longer empty or cannot be
        dropped (an object came to depend on it): the caller merges instead."""
        import psycopg

        model = load.model
        conn = self.conn
        conn.execute(sql.lock_exclusive(staging.target))
        if not self._is_empty(staging.target):
            return False
        try:
            with conn.transaction():
                conn.execute(sql.add_primary_key(staging.table, [c.destination_name for c in model.primary_key]))
        except psycopg.errors.UniqueViolation:
            self._refuse_duplicate_keys(load, staging)
            raise  # not reached: the check above names the duplicate
        try:
            with conn.transaction():
                conn.execute(sql.drop_table(staging.target, if_exists=False))
        except psycopg.errors.DependentObjectsStillExist:
            return False
        self._rename_into(staging.table, staging.target_name)
        return True

    def _rename_into(self, table: str, name: str) -> None:
        """Rename ``table`` (in this schema) to ``name``, its primary key to ``<name>_pkey``."""
        target = qualified(self.schema, name)
        conn = self.conn
        conn.execute(sql.rename_table(table, name))
        (pkey,) = conn.execute(sql.PRIMARY_KEY_NAME, (target,)).fetchone()
        conn.execute(sql.rename_constraint(target, pkey, name + "_pkey"))
