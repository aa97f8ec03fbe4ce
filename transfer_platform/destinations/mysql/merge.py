"""A staged window's one commit: in one transaction the model's status row is locked
(``SELECT ... FOR UPDATE``), the batch merged on the primary key as a staged delete + insert
(the target rows a newer or an equally new but different staged row replaces are deleted, then
the staged rows whose key the target no longer holds are inserted: an older version never
replaces a newer one), its soft deletes applied first, and the new state recorded. Only DML runs
inside it (MySQL commits at any DDL): a crash before COMMIT leaves rows and watermark as they
were.

``INSERT ... ON DUPLICATE KEY UPDATE`` was not used: each of its assignments sees the columns
already assigned before it, so the tie-break on the last-modified column would have to be
assigned last and repeated in every assignment."""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.destinations.base import WindowLoad, WindowResult
from transfer_platform.destinations.mysql import sql

#: ER_DUP_ENTRY
DUPLICATE_ENTRY = 1062

if TYPE_CHECKING:
    from transfer_platform.destinations.mysql.staging import StagingTable


class Merge:
    """The window's commit (a mixin of ``MysqlWriter``)."""

    def _commit(self, staging: StagingTable | None, load: WindowLoad) -> WindowResult:
        model = load.model
        with self._translated_errors(), self._transaction():
            state = self._lock_state(model, "refresh_state" if load.into_refresh else "state")
            if staging is None:
                rows = delta_rows = volume = rows_deleted = 0
                max_lm = None
            else:
                rows, delta_rows, volume = staging.rows, staging.delta_rows, staging.volume
                max_lm = staging.max_last_modified
                rows_deleted = self._merge(load, staging)
            new_state = state.after_window(load.progress, batch_max_last_modified=max_lm,
                                           configured_start=load.configured_start)
            if load.into_refresh:
                self._set(model, "refresh_state", new_state)
            else:
                self._record_state(model, new_state, load.transfer_id)
        return WindowResult(rows, delta_rows, volume, max_lm, new_state, rows_deleted)

    def _merge(self, load: WindowLoad, staging: StagingTable) -> int:
        import pymysql

        model = load.model
        keys = [c.destination_name for c in model.primary_key]
        columns = [c.destination_name for c in model.columns]
        lm = model.last_modified.destination_name
        marker, skip, rows_deleted = model.deletion_marker, None, staging.marked
        if model.removes_deleted_rows:  # rows marked deleted are removed, never inserted
            skip = sql.marked(marker.destination_name, marker.data_type, "s")
            rows_deleted = self._exec(sql.soft_delete(staging.target, staging.table, keys, lm,
                                                      marker.destination_name, marker.data_type))
        if not model.is_append_only:
            self._exec(sql.replaced_rows(staging.target, staging.table, columns, keys, lm))
        try:
            self._exec(sql.insert_new(staging.target, staging.table, columns, keys, skip))
        except pymysql.err.IntegrityError as exc:
            if exc.args and exc.args[0] == DUPLICATE_ENTRY:  # a new key staged twice: named, rolled back
                self._refuse_duplicate_keys(load, staging.table)
            raise
        return rows_deleted
