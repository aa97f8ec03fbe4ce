"""The columns a model would add to or drop from a delivered table, and the rule for drops."""

from __future__ import annotations

import pytest

from transfer_platform.core.columns import ColumnChanges, column_changes, refuse_column_drops
from transfer_platform.errors import SchemaMismatch


@pytest.mark.parametrize(
    ("existing", "wanted", "expected"),
    [
        pytest.param(["id", "kind"], ["id", "kind"], ColumnChanges((), ()), id="same"),
        pytest.param(["id"], ["id", "kind"], ColumnChanges(("kind",), ()), id="added"),
        pytest.param(["id", "kind", "at"], ["id", "at"], ColumnChanges((), ("kind",)), id="dropped"),
        pytest.param(["id", "kind"], ["id", "kindd"], ColumnChanges(("kindd",), ("kind",)), id="renamed"),
        pytest.param(["a", "b", "c"], ["c", "d", "a", "e"], ColumnChanges(("d", "e"), ("b",)),
                     id="orders-kept"),
        pytest.param([], ["id"], ColumnChanges(("id",), ()), id="new-table"),
    ],
)
def test_column_changes(existing, wanted, expected) -> None:
    assert column_changes(existing, wanted) == expected


@pytest.mark.parametrize(("dropped", "allowed"), [((), False), ((), True), (("kind",), True)])
def test_nothing_to_refuse(dropped, allowed) -> None:
    refuse_column_drops("events", "dst", "table t", dropped, allowed=allowed)


def test_a_drop_not_allowed_is_refused_naming_the_column_and_every_fix() -> None:
    with pytest.raises(SchemaMismatch) as caught:
        refuse_column_drops("events", "dst", 'table "s"."events"', ("kind", "note"), allowed=False)
    text = str(caught.value)
    for words in ("model 'events' -> destination 'dst'", "'kind', 'note'", 'table "s"."events"',
                  "name_in_source or name_in_destination", "allow_column_drop: true on model 'events'",
                  "transfer-platform transfer dst --model events --full-refresh", "nothing was changed"):
        assert words in text
    assert caught.value.blame == "provider"


def test_each_change_is_told_in_one_sentence_naming_the_column_and_the_table() -> None:
    from transfer_platform.core.columns import change_sentences

    assert change_sentences('"s"."events"', ["note (string)"], ["old"]) == (
        'added column note (string) to "s"."events"; rows delivered before hold NULL in it until they change '
        "or a full refresh runs",
        'dropped column old from "s"."events" (no longer in the model)')
    assert change_sentences("Delta table events", [], []) == ()
