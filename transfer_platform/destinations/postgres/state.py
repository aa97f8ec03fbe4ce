"""The models' states in ``_transfer_status``: read (without side effects, or locked for the
commit that moves them) and recorded."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.postgres import sql
from transfer_platform.destinations.skeleton import STALE

if TYPE_CHECKING:
    import psycopg

    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.skeleton import Stale


class States:
    """The status table's rows (a mixin of ``PostgresWriter``)."""

    conn: psycopg.Connection
    status_table: str

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """``committed_state`` reads in one READ ONLY transaction, without row locks."""
        conn = self.conn
        with self._translated_errors(), conn.transaction():
            conn.execute("SET TRANSACTION READ ONLY")
            yield

    def _read_states(self, model: ModelConfig) -> tuple[ModelState, ModelState | Stale | None]:
        """The model's state and its unfinished refresh's; a schema or ``_transfer_status`` that
        does not exist (checked with ``to_regclass``, which creates nothing) means nothing was
        ever committed."""
        conn = self.conn
        (exists,) = conn.execute(sql.TABLE_EXISTS, (self.status_table,)).fetchone()
        if not exists:
            return ModelState(), None
        has_refresh = "refresh_state" in self._columns(self.status_table)  # older tables lack it
        row = conn.execute(sql.read_states(self.status_table, has_refresh=has_refresh),
                           (model.model_name,)).fetchone()
        state = ModelState.from_json(row[0] if row else None)
        if row is None or row[1] is None:
            return state, None
        if not self._columns_match(model, self.refresh_table(model)):
            return state, STALE  # the model changed while a refresh was unfinished: it starts again
        return state, ModelState.from_json(row[1])

    def read_state(self, model: ModelConfig, column: str = "state") -> ModelState:
        row = self.conn.execute(sql.read_state(self.status_table, column), (model.model_name,)).fetchone()
        return ModelState.from_json(row[0] if row else None)

    def _ensure_status_row(self, model: ModelConfig) -> None:
        self.conn.execute(sql.ensure_status_row(self.status_table), (model.model_name,))

    def _lock_state(self, model: ModelConfig, column: str) -> ModelState:
        """The model's state, its status row locked until the transaction ends (one writer at a time)."""
        self._ensure_status_row(model)
        row = self.conn.execute(sql.read_state(self.status_table, column, for_update=True),
                                (model.model_name,)).fetchone()
        return ModelState.from_json(row[0] if row else None)

    def _record_state(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        self.conn.execute(
            sql.record_state(self.status_table),
            (state.watermark, state.high_watermark, state.to_json(), transfer_id, model.model_name),
        )

    def _record_refresh_state(self, model: ModelConfig, state: ModelState | None) -> None:
        self.conn.execute(sql.set_refresh_state(self.status_table),
                          (None if state is None else state.to_json(), model.model_name))
