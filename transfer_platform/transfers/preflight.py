"""What a transfer checks before Spark starts (and before anything is written anywhere).

Each check returns problems (a path, what is wrong, the fix); :func:`check_before_spark` raises
them together as one :class:`ConfigError`. The command line runs it before a transfer, a dry run,
a sweep or an integrity check; a problem found here costs no Spark start-up, opens no connection,
writes nothing and moves no watermark.

- every secret the work needs (the destination's, and the sources' of the models moved) has its
  environment variable set (``validate`` only warns about them: it may run where secrets are not
  set, such as CI);
- ``start_transfer_window_at`` (``--start``) is before ``end_transfer_window_at`` (``--end``) and
  not in the future.
"""

from __future__ import annotations

from datetime import datetime

from transfer_platform.config.models import ModelConfig, PlatformConfig
from transfer_platform.config.secrets import unset_secrets
from transfer_platform.core.timeutil import utc
from transfer_platform.errors import ConfigError, Problem


def unset_secrets_of(config: PlatformConfig, *, destinations: set[str] | None = None,
                     sources: set[str] | None = None) -> list[Problem]:
    """The secret references whose variable is unset, of the named destinations and sources (all
    of them when ``None``), each at its path in the file."""
    entries = [(f"destinations[{i}] ({d.name})", d) for i, d in enumerate(config.destinations)
               if destinations is None or d.name in destinations]
    entries += [(f"sources[{i}] ({s.name})", s) for i, s in enumerate(config.sources)
                if sources is None or s.name in sources]
    return unset_secrets(entries)


def secrets_needed(config: PlatformConfig, destination: str, models: list[ModelConfig]) -> list[Problem]:
    """The secret references of the destination and of the models' sources whose variable is unset."""
    return unset_secrets_of(config, destinations={destination}, sources={m.source_name for m in models})


def window_problems(start: datetime | None, end: datetime | None, now: datetime) -> list[Problem]:
    """``--start`` / ``--end`` that could move nothing."""
    problems = []
    if start is not None and end is not None and utc(start) >= utc(end):
        problems.append(Problem("--start", f"{_moment(start)} is not before --end {_moment(end)}: the "
                                "window [start, end) holds no time",
                                "give a --start earlier than --end (--end is exclusive)"))
    if start is not None and utc(start) > utc(now):
        problems.append(Problem("--start", f"{_moment(start)} is in the future (now is {_moment(now)}): "
                                "no row can have been modified then",
                                "give a --start in the past, or leave it out to continue from the watermark"))
    return problems


def check_before_spark(config: PlatformConfig, destination: str, models: list[ModelConfig], *,
                       now: datetime, start: datetime | None = None, end: datetime | None = None,
                       source: str | None = None) -> None:
    """Raise a :class:`ConfigError` listing the problems these checks find (the command's
    arguments first; then the secrets, ``source`` naming the file that references them)."""
    problems = window_problems(start, end, now)
    if problems:
        raise ConfigError(problems)
    problems = secrets_needed(config, destination, models)
    if problems:
        raise ConfigError(problems, source=source)
    from transfer_platform.network.addresses import guard

    guard(config.destination(destination))  # the addresses it may reach, before Spark starts


def _moment(value: datetime) -> str:
    return utc(value).isoformat(timespec="seconds")
