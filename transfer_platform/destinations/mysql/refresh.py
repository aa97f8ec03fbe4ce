"""A full refresh: loaded like any window into a table built aside (``_tp_refresh_<model hash>``),
its progress in ``_transfer_status.refresh_state``; once complete it is published by one atomic
``RENAME TABLE live TO _tp_old_<hash>, aside TO live`` (readers see the old table whole until
then, the new one whole after), and the old table dropped.

MySQL cannot rename inside a transaction (DDL commits), so the state moves in two commits around
the rename: ``published_state`` first, the recorded state after (``state.py`` explains how a
transfer dying between them is finished by the next one). The table replaced keeps no trigger or
index of its own (the new one is built from the model); views naming it follow the name, and
grants given on the table by name stay with the name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from transfer_platform.core.watermarks import ModelState
from transfer_platform.destinations.mysql import sql
from transfer_platform.errors import TransferRunning

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig


class Refresh:
    """The table built aside and its publish (a mixin of ``MysqlWriter``)."""

    def _begin_refresh(self, model: ModelConfig, live: ModelState) -> ModelState:
        state = ModelState(high_watermark=live.high_watermark)
        aside = self.refresh_table(model)
        with self._translated_errors():
            self._exec(sql.drop_table(aside))
            self._exec(sql.target_ddl(aside, model))
            with self._transaction():
                self._exec(sql.ensure_status_row(self.status_table), (model.model_name,))
                self._set(model, "refresh_state", state)
                self._set(model, "published_state", None)
        return state

    @contextmanager
    def _publishing(self) -> Iterator[None]:
        with self._translated_errors():
            yield

    def _refresh_state(self, model: ModelConfig) -> ModelState:
        row = self._one(sql.read_state(self.status_table, "refresh_state"), (model.model_name,))
        return ModelState.from_json(row[0] if row else None)

    def _rename(self, model: ModelConfig, *pairs: tuple[str, str]) -> None:
        """One ``RENAME TABLE``, waiting at most ``Tuning.lock_wait_seconds`` for the live table's
        readers (their open transactions hold its metadata lock); refused after that, nothing
        changed: readers still see the old table and the refresh built aside is kept."""
        import pymysql

        wait = max(1, round(self.tuning.lock_wait_seconds))
        self._exec(f"SET SESSION lock_wait_timeout = {wait}")
        try:
            self._exec(sql.rename_tables(*pairs))
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] == 1205:  # ER_LOCK_WAIT_TIMEOUT
                raise TransferRunning(
                    f"model '{model.model_name}' -> destination '{self.name}': the full refresh is complete "
                    f"but was not published: other sessions kept {self.table(model)} in use for {wait} s "
                    "(RENAME TABLE needs it alone for a moment). Nothing changed: readers still see the old "
                    "table, and the refresh built aside is kept. Fix: run the transfer again once the long "
                    "queries or open transactions on the table have ended; it publishes the refresh") from None
            raise
        finally:
            self._exec("SET SESSION lock_wait_timeout = DEFAULT")

    def _replace_live(self, model: ModelConfig, state: ModelState, transfer_id: str) -> None:
        live, aside = self.table(model), self.refresh_table(model)
        old = sql.qualified(self.database, self.old_table_name(model))
        with self._transaction():
            self._set(model, "published_state", state)
        self._exec(sql.drop_table(old))
        self._rename(model, *(((live, old), (aside, live)) if self._exists(model.model_name) else ((aside, live),)))
        with self._transaction():
            self._record_state(model, state, transfer_id)
            self._set(model, "refresh_state", None)
            self._set(model, "published_state", None)
        self._exec(sql.drop_table(old))
