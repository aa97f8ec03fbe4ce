"""A Dagster lacking some of the fenced private names, as far as ``dagster_internals`` can tell: for
the tests of each part's fallback to Dagster's own behaviour."""

from __future__ import annotations

import warnings

import pytest

from transfer_platform.orchestration.speed import dagster_internals
from transfer_platform.orchestration.speed.dagster_internals import Fenced, UnprovenDagsterWarning


def hide(monkeypatch: pytest.MonkeyPatch, *gone: Fenced) -> None:
    """This process's Dagster lacks ``gone`` from now on: ``Fenced._resolve``, where every check and
    every use looks a private name up, finds nothing for them (our fallbacks are tested, not
    Dagster); the parts look again, as in a process starting on such a Dagster."""
    paths = {f.path for f in gone}
    resolve = Fenced._resolve

    def lacking(self: Fenced):
        if self.path in paths:
            raise AttributeError(f"simulated: this Dagster has no {self.path}")
        return resolve(self)

    monkeypatch.setattr(Fenced, "_resolve", lacking)
    monkeypatch.setattr(dagster_internals, "_CHECKED", {})
    monkeypatch.setattr(dagster_internals, "_WARNED", set())


def fallbacks(record: list[warnings.WarningMessage]) -> list[str]:
    """The fallback warnings among ``record``."""
    return [str(w.message) for w in record if issubclass(w.category, UnprovenDagsterWarning)]
