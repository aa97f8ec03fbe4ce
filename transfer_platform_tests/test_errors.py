"""``errors.translated``: what a driver raises, as the first matching row of a table makes it."""

from __future__ import annotations

import pytest

from transfer_platform.errors import ConnectionFailure, DataError, translated


class Refused(Exception):
    pass


class Lost(Refused):
    pass


TABLE = [
    (Lost, lambda exc: ConnectionFailure("the database", reason=str(exc))),
    ((Refused, KeyError), lambda exc: DataError(f"refused: {exc}", model="m", destination="d", fix="f")),
    ((), lambda exc: AssertionError("an empty tuple matches nothing")),
]


@pytest.mark.parametrize(("raised", "made", "text"), [
    (Lost("gone"), ConnectionFailure, "cannot reach the database: gone"),
    (Refused("no"), DataError, "model 'm' -> destination 'd': refused: no. Fix: f"),
    (KeyError("k"), DataError, "refused: 'k'"),
], ids=["first-row", "a-later-row", "a-tuple-of-kinds"])
def test_the_first_matching_row_makes_the_error_without_the_drivers_as_its_cause(raised, made, text):
    with pytest.raises(made, match=text) as caught, translated(TABLE):
        raise raised
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_what_no_row_matches_is_raised_as_it_is():
    with pytest.raises(ValueError, match="other") as caught, translated(TABLE):
        raise ValueError("other")
    assert not caught.value.__suppress_context__
