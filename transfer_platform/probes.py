"""What ``test-connection`` reports: one :class:`Check` per thing a transfer needs, collected by a
:class:`Probe` in each vendor's ``probe`` method (see ``transfers/connection_test.py``)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from transfer_platform.errors import ConfigError, ConnectionFailure, first_line

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


class Step(NamedTuple):
    """One step a transfer takes, tried by ``test-connection``: the statements run in turn (a callable one
    called), the fix a failure prints (or its maker, given the error), what a pass says."""

    name: str
    fix: str | Callable[[Exception], str]
    statements: Sequence[Any]
    detail: str = ""
    skips: str = "the step before failed"  # why the steps after it skip when it fails


@dataclass
class ProbePlan:
    """What a SQL vendor's ``test-connection`` tries (``SqlWriter.probe`` runs it): the endpoint reached
    first (``None``: none to reach), the login, the steps, then the cleanup, each part tried (callables
    called, statements run)."""

    login: str  # the login's check
    connect: Callable[[], object]
    login_fix: str | Callable[[Exception], str]
    steps: list[Step]
    errors: type[Exception] | tuple[type[Exception], ...]  # what a refused step raises
    reason: Callable[[Exception], str] = first_line  # what a refused step's check says
    cleanup: Sequence[Any] = ()
    endpoint: tuple[str, int] | None = None
    login_errors: tuple[type[Exception], ...] = (ConnectionFailure, ConfigError)
    after: Sequence[str] = ()  # the checks the vendor's run adds after the steps
    unreachable: str = "the server cannot be reached"
    no_login: str = "cannot log in"


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

    def run(self, steps: Sequence[Step], execute: Callable[[Any], object],
            errors: type[Exception] | tuple[type[Exception], ...], reason: Callable[[Exception], str]) -> None:
        """Each step's statements executed in turn (a callable one called): passed, or failed naming its fix
        (the steps after it skipped)."""
        for index, step in enumerate(steps):
            try:
                for statement in step.statements:
                    if callable(statement):
                        statement()
                    else:
                        execute(statement)
            except errors as exc:
                self.failed(step.name, reason(exc), step.fix if isinstance(step.fix, str) else step.fix(exc))
                self.skipped([later.name for later in steps[index + 1:]], step.skips)
                return
            self.passed(step.name, step.detail)

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
