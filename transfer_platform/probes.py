"""What ``test-connection`` reports: one :class:`Check` per thing a transfer needs, collected by a
:class:`Probe` in each vendor's ``probe`` method (see ``transfers/connection_test.py``)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Outcome = Literal["PASS", "FAIL", "SKIP"]


@dataclass(frozen=True)
class Check:
    """One thing a transfer needs, and whether it can be done."""

    target: str  # "destination 'x'" / "source 'y'"
    name: str  # what was tried, e.g. "create, alter, rename and drop tables in schema \"s\""
    outcome: Outcome
    detail: str = ""  # what the server said (a failure), or what was found
    fix: str = ""  # the GRANT or setting that fixes a failure

    @property
    def failed(self) -> bool:
        return self.outcome == "FAIL"

    def line(self) -> str:
        text = f"{self.outcome}  {self.target}: {self.name}"
        if self.detail:
            text += f" ({self.detail})"
        if self.fix:
            text += f". Fix: {self.fix}"
        return text

    def as_dict(self) -> dict[str, str]:
        return {"target": self.target, "check": self.name, "outcome": self.outcome,
                "detail": self.detail, "fix": self.fix}


class Probe:
    """Collects the checks of one target; after a failure that later checks need, they skip."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.checks: list[Check] = []

    def passed(self, name: str, detail: str = "") -> None:
        self.checks.append(Check(self.target, name, "PASS", detail))

    def failed(self, name: str, detail: str, fix: str) -> None:
        self.checks.append(Check(self.target, name, "FAIL", detail, fix))

    def skipped(self, names: Iterable[str], because: str) -> None:
        self.checks.extend(Check(self.target, name, "SKIP", because) for name in names)

    def run(self, steps: Sequence[tuple[str, str | Callable[[Exception], str], Sequence[Any]]],
            execute: Callable[[Any], object], errors: type[Exception] | tuple[type[Exception], ...],
            reason: Callable[[Exception], str]) -> bool:
        """Each step's statements executed in turn: passed, or failed naming its fix (the steps after it
        skipped); whether every step passed. A step is (its name, its fix or its maker, its statements)."""
        for index, (name, fix, statements) in enumerate(steps):
            try:
                for statement in statements:
                    execute(statement)
            except errors as exc:
                self.failed(name, reason(exc), fix if isinstance(fix, str) else fix(exc))
                self.skipped([step[0] for step in steps[index + 1:]], "the step before failed")
                return False
            self.passed(name)
        return True

    def reach(self, host: str, port: int, timeout: float = 10.0) -> bool:
        """A TCP connection to ``host:port``: the server is there (before any credentials)."""
        name = f"reach {host}:{port}"
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except OSError as exc:
            self.failed(name, exc.strerror or str(exc),
                        "check that the server is running and that host and port in the "
                        "configuration are right, and that no firewall stands between")
            return False
        self.passed(name)
        return True


def current_user() -> str:
    """The name of the user this process runs as (for file permissions; not ``$USER``)."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def no_recipient(tenants: list[str] | None, multi_tenant: bool) -> list[str]:
    """The tenants to read a model for: a multi-tenant source is read (as one tenant) even when
    no recipient receives the model yet; a schema-tenanted one has no schema to read then."""
    return tenants or (["(no recipient)"] if multi_tenant else [])
