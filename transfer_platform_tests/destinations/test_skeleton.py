"""The writer skeleton: a destination implements every primitive, or its class is refused when
it is defined (at import), naming the class and what it lacks; the order is the skeleton's."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from transfer_platform.core.columns import ColumnChanges
from transfer_platform.core.watermarks import ModelState
from transfer_platform.core.windows import Window
from transfer_platform.destinations.base import WindowLoad, WindowResult
from transfer_platform.destinations.skeleton import STALE, Writer
from transfer_platform.tuning import DEFAULT, Tuning


class Recorder(Writer, abstract=True):
    """Every primitive, recording its name (and answering what the test sets)."""

    def __init__(self, destination, tuning: Tuning = DEFAULT, *, states=None) -> None:
        super().__init__(destination, tuning)
        self.calls: list[str] = []
        self.states = (ModelState(), None) if states is None else states

    def _record(self, name: str):
        self.calls.append(name)

    def check(self) -> None: self._record("check")
    def close(self) -> None: self._record("close")
    def lock_model(self, model, transfer_id) -> None: self._record("lock_model")
    def _reach(self) -> None: self._record("reach")
    def _clean_staging(self, model) -> None: self._record("clean_staging")
    def _read_states(self, model):
        self._record("read_states")
        return self.states
    def _begin_refresh(self, model, live):
        self._record("begin_refresh")
        return ModelState(high_watermark=live.high_watermark)
    def _plan_columns(self, model):
        self._record("plan_columns")
        return ColumnChanges(("new",), ())
    def _apply_columns(self, model, planned, state):
        self._record("apply_columns")
        return ("added new",)
    def _announce(self, model, transfer_id) -> None: self._record("announce")
    def _create_staging(self, load, *, in_memory):
        self._record("create_staging")
        return "staging"
    def _stage_frame(self, frame, staging, load):
        self._record("stage_frame")
        return "staged"
    def _stage_arrow(self, batch, staging, load):
        self._record("stage_arrow")
        return "staged"
    def _refuse(self, staged, load) -> None:
        self._record("refuse")
        if staged == "bad":
            raise ValueError("a NULL key")
    def _commit(self, staged, load):
        self._record(f"commit {staged}")
        return WindowResult(0, 0, 0, None, ModelState())
    def _remove_staging(self, staging, load) -> None: self._record("remove_staging")
    @contextmanager
    def _publishing(self):
        self._record("begin")
        yield
        self._record("end")
    def _refresh_state(self, model):
        self._record("refresh_state")
        return ModelState()
    def _replace_live(self, model, state, transfer_id) -> None: self._record("replace_live")
    def read_table(self, spark, model): ...
    def has_table(self, model): ...
    def delete_rows(self, frame, model, transfer_id): ...
    def probe(self, models, target): ...


class Complete(Recorder):
    pass


DESTINATION = SimpleNamespace(name="d")
MODEL = SimpleNamespace(model_name="m")
LOAD = WindowLoad(model=MODEL, transfer_id="t", progress=Window(datetime(2024, 1, 1, tzinfo=UTC),
                                                                  datetime(2024, 1, 2, tzinfo=UTC)),
                  configured_start=datetime(2024, 1, 1, tzinfo=UTC))


def test_a_writer_missing_primitives_is_refused_when_its_class_is_defined() -> None:
    with pytest.raises(TypeError) as refused:
        class HalfDone(Writer):
            def check(self) -> None: ...
            def _commit(self, staged, load): ...

    message = str(refused.value)
    assert "HalfDone" in message
    for missing in ("_stage_frame", "_read_states", "lock_model", "_replace_live"):
        assert missing in message
    assert "check," not in message
    assert "_commit," not in message


def test_every_destination_implements_every_primitive() -> None:
    from transfer_platform.destinations.delta import DeltaWriter
    from transfer_platform.destinations.object_storage import ObjectStorageWriter
    from transfer_platform.destinations.postgres import PostgresWriter

    for writer in (PostgresWriter, DeltaWriter, ObjectStorageWriter):
        assert issubclass(writer, Writer)
        assert not [p for p in Writer.PRIMITIVES if getattr(getattr(writer, p), "__primitive__", False)]


def test_the_primitives_are_the_marked_methods() -> None:
    assert {"_read_states", "_stage_frame", "_stage_arrow", "_refuse", "_commit", "_remove_staging",
            "_replace_live", "lock_model", "probe"} <= set(Writer.PRIMITIVES)
    assert "prepare" not in Writer.PRIMITIVES  # a template method: never a vendor's


def test_an_incremental_prepare_locks_cleans_reads_plans_announces_then_alters() -> None:
    writer = Complete(DESTINATION)
    prepared = writer.prepare(MODEL, "t")
    assert writer.calls == ["reach", "lock_model", "clean_staging", "read_states", "plan_columns",
                            "announce", "apply_columns"]
    assert prepared.refresh is None
    assert prepared.schema_changes == ("added new",)


def test_a_full_refresh_or_a_stale_one_begins_aside_an_unfinished_one_is_carried_on() -> None:
    writer = Complete(DESTINATION, states=(ModelState(), None))
    assert writer.prepare(MODEL, "t", full_refresh=True).refresh == ModelState()
    assert writer.calls[-2:] == ["announce", "begin_refresh"]

    writer = Complete(DESTINATION, states=(ModelState(), STALE))
    writer.prepare(MODEL, "t")
    assert writer.calls[-2:] == ["announce", "begin_refresh"]

    unfinished = ModelState(watermark=datetime(2024, 1, 1, tzinfo=UTC))
    writer = Complete(DESTINATION, states=(ModelState(), unfinished))
    assert writer.prepare(MODEL, "t").refresh == unfinished
    assert "begin_refresh" not in writer.calls
    assert "plan_columns" not in writer.calls


def test_committed_state_reads_only_and_a_stale_refresh_starts_from_the_live_high_watermark() -> None:
    high = datetime(2024, 1, 1, tzinfo=UTC)
    writer = Complete(DESTINATION, states=(ModelState(high_watermark=high), STALE))
    prepared = writer.committed_state(MODEL)
    assert writer.calls == ["read_states"]
    assert prepared.refresh == ModelState(high_watermark=high)


def test_a_window_is_staged_checked_committed_and_its_staging_removed_even_when_refused() -> None:
    writer = Complete(DESTINATION)
    writer.write_window(object(), LOAD)
    assert writer.calls == ["create_staging", "stage_frame", "refuse", "commit staged", "remove_staging"]

    writer = Complete(DESTINATION)
    writer._stage_arrow = lambda batch, staging, load: "bad"
    with pytest.raises(ValueError, match="NULL key"):
        writer.write_arrow(object(), LOAD)
    assert writer.calls == ["create_staging", "refuse", "remove_staging"]  # never committed

    writer = Complete(DESTINATION)
    writer.write_empty(LOAD)
    assert writer.calls == ["commit None"]


def test_a_publish_reads_the_refresh_state_and_replaces_the_live_table_in_one_commit() -> None:
    writer = Complete(DESTINATION)
    writer.publish_refresh(MODEL, "t")
    assert writer.calls == ["begin", "refresh_state", "replace_live", "end"]


def test_a_writer_is_given_its_tuning() -> None:
    assert Complete(DESTINATION).tuning is DEFAULT
    assert Complete(DESTINATION, Tuning(lock_wait_seconds=1)).tuning.lock_wait_seconds == 1
