"""A full refresh on an engine whose DDL is not transactional (MySQL: DDL commits): the table built
aside replaces the live one by one atomic rename between two commits of the status row.

``published_state`` is written first (the refresh's complete state), then the tables are renamed
(``live -> _tp_old_<hash>``, ``aside -> live``), then the state recorded and ``published_state``
cleared. A transfer that died between the rename and that record is finished by the next one
(:func:`finish_publish`, under the model's lock); until then ``SqlWriter._read_states`` already
reports the published state, so readers and the next transfer agree on what the table holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.sql.dialect import STATUS_TABLE

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.sql.writer import SqlWriter


def begin_refresh(writer: SqlWriter, model: ModelConfig, ddl: list[str], state: ModelState) -> None:
    """The old progress forgotten before the aside table is replaced (so no state ever points at a
    table emptied), the table replaced, then the new progress recorded."""
    session = writer.session
    with session.transaction():
        writer._ensure_status_row(model)
        writer._set_state(model, "refresh_state", None)
        writer._set_state(model, "published_state", None)
    for statement in ddl:
        session.execute(statement)
    with session.transaction():
        writer._set_state(model, "refresh_state", state)


def publish(writer: SqlWriter, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
    session, dialect = writer.session, writer.dialect
    live, aside = writer.table(model), writer.refresh_table(model)
    old_name = writer.old_table_name(model)
    old = dialect.qualified(writer.container, old_name)
    with session.transaction():
        writer._set_state(model, "published_state", state)
    session.execute(dialect.drop_table(old))
    renamed = [(live, old_name)] if writer._exists(model.model_name) else []
    writer._rename(model, [*renamed, (aside, model.model_name)])
    with session.transaction():
        writer._record_state(model, state, transfer_id)
        writer._set_state(model, "refresh_state", None)
        writer._set_state(model, "published_state", None)
    session.execute(dialect.drop_table(old))


def finish_publish(writer: SqlWriter, model: ModelConfig) -> None:
    """A refresh whose publish died: recorded if its tables were renamed, else forgotten."""
    if not writer._exists(STATUS_TABLE):
        return
    row = writer.session.one(writer.dialect.read_state(writer.status_table, "published_state", model.model_name))
    if row is None or row[0] is None:
        return
    with writer.session.transaction():
        if not writer._exists(writer.refresh_table_name(model)):
            writer._record_state(model, ModelState.from_json(row[0]), "(a publish finished after its transfer died)")
            writer._set_state(model, "refresh_state", None)
        writer._set_state(model, "published_state", None)
