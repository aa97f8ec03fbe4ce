"""A full refresh on an engine whose DDL is not transactional (MySQL: DDL commits): the table built
aside replaces the live one by one atomic rename between two commits of the status row.

``published_state`` is written first (the refresh's complete state), then the tables are renamed
(``live -> _tp_old_<hash>``, ``aside -> live``), then the state recorded and ``published_state``
cleared. A transfer that died between the rename and that record is finished by the next one
(:func:`finish_publish`, under the model's lock); until then ``SqlWriter._read_states`` already
reports the published state, so readers and the next transfer agree on what the table holds.
The empty-table load ``create-and-rename`` publishes its fresh table the same way (:func:`start_fresh`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.skeleton import next_state
from transfer_platform.destinations.sql.dialect import STATUS_TABLE
from transfer_platform.errors import TransferRunning, transfer_running
from transfer_platform.phases import log_phase

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig
    from transfer_platform.destinations.base import WindowLoad
    from transfer_platform.destinations.sql.writer import SqlWriter, StagingTable


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


def start_fresh(writer: SqlWriter, load: WindowLoad, staging: StagingTable) -> bool:
    """A window into an empty target loaded into a fresh table of its definition, key included (a
    staging table's name: a dead transfer's is dropped by the next), fits a refresh's table aside
    before its first window is committed, or a live table nothing depends on."""
    if load.into_refresh:
        fits = writer.read_state(load.model, "refresh_state").watermark is None
    else:
        fits = not (writer.session.one(writer.dialect.dependents(writer.container, staging.target_name)) or (0,))[0]
    if fits:
        writer.session.execute(writer.dialect.drop_table(staging.table))
        writer.session.execute(writer.dialect.create_like(staging.table, staging.target))
    return fits


def publish_fresh(writer: SqlWriter, staging: StagingTable, load: WindowLoad) -> ModelState:
    """The fresh table replaces its target with the window's state: a refresh's table aside (no
    reader's, empty) dropped for it, or the live table as a refresh's :func:`publish` replaces it."""
    model, column = load.model, "refresh_state" if load.into_refresh else "state"
    with writer._atomically(load):  # the status row made if missing (the publish updates it)
        new_state = next_state(writer._lock_state(model, column), load, staging.max_last_modified)
    aside = staging.target if load.into_refresh else writer.refresh_table(model)
    writer.session.execute(writer.dialect.drop_table(aside))
    writer._rename(model, [(staging.table, writer.refresh_table_name(model))])
    if load.into_refresh:
        with writer._atomically(load):
            writer._lock_state(model, column)
            writer._set_state(model, column, new_state)
        return new_state
    try:
        publish(writer, model, new_state, load.transfer_id)
    except TransferRunning:
        raise transfer_running(
            model.model_name, writer.name, f"the window was loaded into a new table but could not replace the "
            f"empty {writer.table(model)}: other sessions kept it in use for "
            f"{max(1, round(writer.tuning.lock_wait_seconds))} s. Nothing changed: the table and the watermark are "
            "as they were", "run the transfer again once the queries or open transactions on the table have ended"
        ) from None
    return new_state


def clean_fresh(writer: SqlWriter, model: ModelConfig) -> None:
    """What a dead fresh-table window left: a table aside no refresh owns dropped, a refresh's
    holding rows though none of its windows was committed (died before its commit) emptied."""
    aside = writer.refresh_table(model)
    if not writer._exists(writer.refresh_table_name(model)):
        return
    refresh, published = (writer._status_row(model) or (None, None, None))[1:]
    if published is not None or refresh is not None and (
            ModelState.from_json(refresh).watermark is not None or not writer._has_rows(aside)):
        return
    writer.session.execute(writer.dialect.drop_table(aside))
    if refresh is not None:
        writer.session.execute(writer.dialect.target_ddl(aside, model))
    log_phase("clean up", transfer_id="(a dead transfer)", destination=writer.name, model=model.model_name,
              staging_table=writer.refresh_table_name(model), left_by_a_dead_transfer=True)
