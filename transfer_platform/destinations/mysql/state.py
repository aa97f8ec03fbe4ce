"""The models' states in ``_transfer_status`` (in the destination database): read (without side
effects, or locked for the commit that moves them) and recorded.

A full refresh is published by an atomic ``RENAME TABLE``, which MySQL cannot run inside a
transaction (DDL commits): its state is first written to ``published_state``, then the tables are
renamed, then the state recorded. A transfer that died between the rename and that record is
finished by the next one (:meth:`States._finish_publish`, under the model's lock); until then
:meth:`_read_states` already reports the published state."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING

from transfer_platform.core.timeutil import utc
from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.mysql import sql
from transfer_platform.destinations.skeleton import STALE

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.skeleton import Stale


def param(value: object) -> object:
    """A parameter as MySQL takes it: a datetime as naive UTC (the session is in UTC)."""
    if isinstance(value, datetime):
        return utc(value).replace(tzinfo=None)
    return value


class States:
    """The status table's rows (a mixin of ``MysqlWriter``)."""

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """``committed_state`` reads in one READ ONLY transaction (a consistent snapshot)."""
        with self._translated_errors():
            self._exec("START TRANSACTION READ ONLY")
            try:
                yield
            finally:
                self.conn.rollback()

    def _read_states(self, model: ModelConfig) -> tuple[ModelState, ModelState | Stale | None]:
        if not self._exists(sql.STATUS_TABLE):
            return ModelState(), None
        row = self._one(sql.read_states(self.status_table), (model.model_name,))
        if row is None:
            return ModelState(), None
        state, refresh, published = row
        if published is not None and not self._exists(self.refresh_table_name(model)):
            return ModelState.from_json(published), None  # published, its state not yet recorded
        if refresh is None:
            return ModelState.from_json(state), None
        if not self._columns_match(model, self.refresh_table_name(model)):
            return ModelState.from_json(state), STALE
        return ModelState.from_json(state), ModelState.from_json(refresh)

    def _finish_publish(self, model: ModelConfig) -> None:
        """A refresh whose publish died: recorded if its tables were renamed, else forgotten."""
        if not self._exists(sql.STATUS_TABLE):
            return
        row = self._one(sql.read_state(self.status_table, "published_state"), (model.model_name,))
        if row is None or row[0] is None:
            return
        with self._transaction():
            if not self._exists(self.refresh_table_name(model)):
                self._record_state(model, ModelState.from_json(row[0]), "(a publish finished after its transfer died)")
                self._set(model, "refresh_state", None)
            self._set(model, "published_state", None)

    def _lock_state(self, model: ModelConfig, column: str) -> ModelState:
        """The model's state, its status row locked until the transaction ends."""
        self._exec(sql.ensure_status_row(self.status_table), (model.model_name,))
        row = self._one(sql.read_state(self.status_table, column, for_update=True), (model.model_name,))
        return ModelState.from_json(row[0] if row else None)

    def _record_state(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        self._exec(sql.record_state(self.status_table),
                   (param(state.watermark), param(state.high_watermark), state.to_json(), transfer_id,
                    model.model_name))

    def _set(self, model: ModelConfig, column: str, state: ModelState | None) -> None:
        self._exec(sql.set_column(self.status_table, column),
                   (None if state is None else state.to_json(), model.model_name))
