"""Where a SQL destination keeps each model's state, chosen by its vendor record
(``Vendor.state_store``): :class:`StatusRows` (``status row``: a row per model of
``_transfer_status``, written in the window's transaction) or :class:`TableComments` (``table
comment``: each model table's comment, swapped in with its rows, for an engine without
multi-statement transactions; ``_transfer_status`` is then a view of the comments).

A store reads and writes a model's state (``state``, the live table's) and its unfinished full
refresh's (``refresh_state``); the writer's commit decides when (:mod:`.writer`).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from transfer_platform.core.watermarks import ModelState

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.sql.writer import SqlWriter


class StatusRows:
    """``_transfer_status``'s row of the model: its state columns, read locked in a commit."""

    def __init__(self, writer: SqlWriter) -> None:
        self.writer = writer

    @property
    def _run(self):  # the writer's session and dialect, and the status table
        w = self.writer
        return w.session, w.dialect, w.status_table

    def row(self, model: ModelConfig) -> tuple | None:
        """(state, refresh_state, published_state) of the model, as text; ``None`` if no row."""
        session, dialect, status = self._run
        return session.one(dialect.read_states(status, model.model_name))

    def ensure(self, model: ModelConfig) -> None:
        session, dialect, status = self._run
        session.execute(dialect.ensure_status_row(status, model.model_name))

    def read(self, model: ModelConfig, column: str) -> ModelState:
        session, dialect, status = self._run
        row = session.one(dialect.read_state(status, column, model.model_name))
        return ModelState.from_json(row[0] if row else None)

    def lock(self, model: ModelConfig, column: str) -> ModelState:
        """The model's state, its status row locked until the transaction ends (one writer at a time)."""
        self.ensure(model)
        session, dialect, status = self._run
        row = session.one(dialect.read_state(status, column, model.model_name, for_update=True))
        return ModelState.from_json(row[0] if row else None)

    def record(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        session, dialect, status = self._run
        session.execute(dialect.record_state(status, model.model_name, state.watermark, state.high_watermark,
                                             state.to_json(), transfer_id))

    def set(self, model: ModelConfig, column: str, state: ModelState | None) -> None:
        session, dialect, status = self._run
        session.execute(dialect.set_state_column(status, column, model.model_name,
                                                 None if state is None else state.to_json()))


class TableComments:
    """The model table's comment: ``{"state": ..., "last_transfer_id": ..., "updated_at_us": ...}``
    (the live table's is the model's state, the refresh's table aside's its progress). A window's
    comment is written with its rows (:meth:`comment`, given to the clone that is swapped in); the
    model's lock keeps other writers out, so reading it locks nothing. The dialect gives
    ``comment(container, name)`` and ``set_comment(table, text)``."""

    def __init__(self, writer: SqlWriter) -> None:
        self.writer = writer
        self._dialect: Any = writer.dialect  # one that writes comments (ClickHouse's)

    def _table_state(self, name: str) -> str | None:
        """The state (ModelState JSON) in table ``name``'s comment; ``None`` if none."""
        w = self.writer
        row = w.session.one(self._dialect.comment(w.container, name))
        if row is None or not row[0]:
            return None
        try:
            state = json.loads(row[0]).get("state")
        except (ValueError, AttributeError):
            return None
        return None if state is None else json.dumps(state)

    @staticmethod
    def comment(state: ModelState, transfer_id: str) -> str:
        """The comment that carries ``state``."""
        return json.dumps({"state": json.loads(state.to_json()), "last_transfer_id": transfer_id,
                           "updated_at_us": int(time.time() * 1_000_000)}, sort_keys=True)

    def row(self, model: ModelConfig) -> tuple | None:
        w = self.writer
        return (self._table_state(model.model_name), self._table_state(w.refresh_table_name(model)), None)

    def ensure(self, model: ModelConfig) -> None:
        """Nothing: a model's row of ``_transfer_status`` is its table's comment."""

    def read(self, model: ModelConfig, column: str) -> ModelState:
        name = self.writer.refresh_table_name(model) if column == "refresh_state" else model.model_name
        return ModelState.from_json(self._table_state(name))

    def lock(self, model: ModelConfig, column: str) -> ModelState:
        return self.read(model, column)  # the model's lock keeps other writers out

    def record(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        w = self.writer
        w.session.execute(self._dialect.set_comment(w.table(model), self.comment(state, transfer_id)))

    def set(self, model: ModelConfig, column: str, state: ModelState | None) -> None:
        """A refresh's progress on its table aside (forgotten with that table: ``None`` writes nothing)."""
        w = self.writer
        if column == "refresh_state" and state is not None:
            w.session.execute(self._dialect.set_comment(w.refresh_table(model), self.comment(state, "")))


#: the stores a SQL vendor's record chooses from (``Vendor.state_store``)
STATE_STORES = {"status row": StatusRows, "table comment": TableComments}
