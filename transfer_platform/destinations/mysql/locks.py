"""A model's lock in the destination server: ``GET_LOCK`` named per destination database and
model, held by the writer's session (released when its connection closes or its process dies)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from transfer_platform.destinations.mysql import sql
from transfer_platform.errors import TransferRunning

if TYPE_CHECKING:
    from transfer_platform.config.models import ModelConfig


class Locks:
    """The models' locks this writer's session holds (a mixin of ``MysqlWriter``)."""

    def lock_model(self, model: ModelConfig, transfer_id: str) -> None:
        """Two transfers (or sweeps) of one model to one destination never interleave, however
        they were started; a second one waits up to ``Tuning.lock_wait_seconds``, then is refused."""
        name = sql.model_lock_name(self.database, model.model_name)
        if name in self._locked:
            return
        with self._translated_errors():
            (got,) = self._one("SELECT GET_LOCK(%s, %s)", (name, max(0.0, float(self.tuning.lock_wait_seconds))))
            if got != 1:
                holder = self._one(sql.LOCK_HOLDER, (name,))
        if got != 1:
            who = (f"session of {holder[0]}@{holder[1]}, running for {holder[2]} s" if holder
                   else "another session")
            raise TransferRunning(
                f"model '{model.model_name}' -> destination '{self.name}': another transfer of this "
                f"model to this destination is running ({who}); two transfers never write one "
                "table at once. Fix: wait for it to end, or cancel it (transfer-platform cancel "
                "TRANSFER_ID), then run this one again; transfers queued through Dagster wait for "
                "each other by themselves")
        self._locked.add(name)
