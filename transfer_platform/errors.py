"""Every error the platform raises on purpose.

Three families, so callers (the CLI, Dagster, later the lifecycle) can tell who must act:

- ``ConfigError``: the user must change the configuration (or the environment it references),
  including a model that does not fit its source (a column the source does not return, a type
  that cannot be read as the model's data_type).
- ``DataError``: the source data breaks a rule (duplicate primary key, NULL last-modified value,
  a value that cannot be cast); the provider must fix the data or the model.
- ``ConnectionFailure``: a database or path cannot be reached; retrying may help.

Messages name the model, destination and value involved and say how to fix the problem.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class TransferPlatformError(Exception):
    """Base class: anything raised on purpose by transfer_platform."""

    #: who is to blame, in the reference system's words (provider / recipient / platform)
    blame: str = "platform"


@dataclass(frozen=True)
class Problem:
    """One problem found in a configuration file: where, what, and how to fix it."""

    path: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}"
        return f"{text}\n    fix: {self.fix}" if self.fix else text


class ConfigError(TransferPlatformError):
    """The configuration (or an environment variable it references) is wrong."""

    blame = "provider"

    def __init__(self, problems: list[Problem] | str, *, source: str | None = None) -> None:
        if isinstance(problems, str):
            problems = [Problem(path=source or "configuration", message=problems)]
        self.problems = list(problems)
        self.source = source
        header = f"invalid configuration{f' in {source}' if source else ''}"
        body = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{header} ({len(self.problems)} problem(s)):\n{body}")


class DataError(TransferPlatformError):
    """The source rows of a model break a rule; nothing was written."""

    blame = "provider"

    def __init__(self, message: str, *, model: str, destination: str, fix: str) -> None:
        self.model = model
        self.destination = destination
        self.fix = fix
        super().__init__(f"model '{model}' -> destination '{destination}': {message}. Fix: {fix}")


class DuplicateKey(DataError):
    """A window holds one primary key twice (after one version per key was chosen: two rows of
    the key share its latest last-modified value). ``key_values``: the key, by column."""

    def __init__(self, message: str, *, model: str, destination: str, fix: str,
                 key_values: dict[str, object]) -> None:
        self.key_values = key_values
        super().__init__(message, model=model, destination=destination, fix=fix)


class ConnectionFailure(TransferPlatformError):
    """A database or storage location cannot be reached. Retrying may help."""

    def __init__(self, what: str, *, host: str | None = None, port: int | None = None,
                 reason: str = "", fix: str = "") -> None:
        where = f" at {host}:{port}" if host is not None else ""
        text = f"cannot reach {what}{where}"
        if reason:
            text += f": {reason}"
        if fix:
            text += f". Fix: {fix}"
        self.host = host
        self.port = port
        self.reason = reason
        self.fix = fix
        super().__init__(text)


class DagsterStorageError(ConnectionFailure):
    """Dagster's own storage (its SQLite files under ``$DAGSTER_HOME``) cannot be opened as it is:
    the message names the file and what is wrong with it (not a connection), and the fix."""

    def __init__(self, path: str, problem: str, *, fix: str) -> None:
        TransferPlatformError.__init__(self, f"Dagster's storage at {path} {problem}. Fix: {fix}")
        self.host, self.port, self.path, self.reason, self.fix = None, None, path, problem, fix


class MissingPrivilege(TransferPlatformError):
    """The role a destination (or source) connects as lacks a right the transfer needs; the
    message names the right, the object and the ``GRANT`` that gives it."""

    blame = "recipient"

    def __init__(self, what: str, *, role: str, reason: str, grant: str) -> None:
        self.role = role
        self.grant = grant
        super().__init__(f"{what}: role {role!r} may not do what the transfer needs ({reason}). "
                         f"Fix: {grant}")


class TransferRunning(TransferPlatformError):
    """Another transfer of the same model to the same destination holds its lock (it was started
    outside the run queue, which would have kept the two apart). Retrying after it ends helps."""

    blame = "platform"


def transfer_running(model: str, destination: str | None, why: str, fix: str) -> TransferRunning:
    """The one maker of :class:`TransferRunning`: "model 'M' -> destination 'D': <why>. Fix: <fix>"
    (``destination`` ``None``: a lock of a store, named in ``why``)."""
    where = f"model '{model}'" if destination is None else f"model '{model}' -> destination '{destination}'"
    return TransferRunning(f"{where}: {why}. Fix: {fix}")


class SchemaMismatch(TransferPlatformError):
    """The destination table's schema cannot take the model as configured."""

    blame = "provider"


class TransferCancelled(KeyboardInterrupt):
    """A running transfer was stopped: cancelled by a user (the UI's Terminate, ``transfer-platform
    cancel``) or its process was asked to stop. A ``KeyboardInterrupt``, so Dagster still ends the
    run as cancelled; its message says what happened instead of a bare interrupt."""

    blame = "platform"


def one_line(exc: BaseException) -> str:
    """What ``exc`` says in one line: a configuration error's problems, each with its fix, joined;
    any other's first line."""
    if isinstance(exc, ConfigError):
        return "; ".join(f"{p.path}: {p.message}" + (f". Fix: {p.fix}" if p.fix else "") for p in exc.problems)
    return first_line(exc)


def first_line(exc: BaseException) -> str:
    """The first line of what ``exc`` says (its type's name if it says nothing): a driver's
    reason without the detail lines that follow it."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


#: (what a driver raises, the maker of the platform's error for it), for :func:`translated`
Translations = list[tuple[type[BaseException] | tuple[type[BaseException], ...], Callable[[Exception], Exception]]]


@contextmanager
def translated(table: Translations) -> Iterator[None]:
    """What is raised inside, as the first row of ``table`` that matches makes it (``from None``:
    the driver's text only through the maker); anything else raised as it is."""
    try:
        yield
    except Exception as exc:
        for kinds, make in table:
            if isinstance(exc, kinds):
                raise make(exc) from None
        raise
