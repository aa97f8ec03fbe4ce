"""Shards: a code location holding a share of the recipients (docs/operations.md, "Scaling out").

A shard is ``i/n`` (0 <= i < n): the recipients whose name hashes to ``i`` modulo ``n``, with
their destinations; every source and model stays. The hash is of the recipient's name alone
(BLAKE2b, not Python's per-process ``hash``), so a recipient stays in its shard whatever else the
file holds, and every recipient is in exactly one of the ``n`` shards. A recipient's destinations
are always in the same shard.

It is given by ``TRANSFER_PLATFORM_SHARD=i/n`` in a code location's environment, or by the
attribute the workspace loads, ``transfer_platform.definitions:defs_shard_<i>_of_<n>`` (which
travels with each run's code pointer, so runs started outside the code server, such as the
daemon's preloaded run workers, build the same share).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

from transfer_platform.config.models import PlatformConfig
from transfer_platform.errors import ConfigError, Problem

ENV_VAR = "TRANSFER_PLATFORM_SHARD"
_FORM = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
_FIX = (f"set {ENV_VAR} to i/n with 0 <= i < n (e.g. 0/4 ... 3/4: four code locations, one per value), "
        "or unset it for every recipient in one code location")


@dataclass(frozen=True, order=True)
class Shard:
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, recipient: str) -> bool:
        return shard_of(recipient, self.count) == self.index


def does_instance_upkeep(shard: Shard | None) -> bool:
    """Whether this code location does the instance-wide upkeep (the lifecycle sweep of every
    transfer run, run retention): the unsharded one, or shard 0 (else every shard would do it)."""
    return shard is None or shard.index == 0


def shard_of(recipient: str, count: int) -> int:
    """The shard (0 ... count-1) of the recipient named ``recipient``, stable across processes."""
    digest = hashlib.blake2b(recipient.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def parse_shard(text: str | None, *, where: str = ENV_VAR) -> Shard | None:
    """``"i/n"`` -> :class:`Shard`; empty or ``None`` -> ``None`` (every recipient). Anything else
    raises :class:`ConfigError` naming ``where`` and the fix."""
    if text is None or not text.strip():
        return None
    match = _FORM.fullmatch(text)
    if match is None:
        raise ConfigError([Problem(where, f"{text!r} is not a shard (expected i/n, such as 0/4)", _FIX)])
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or index >= count:
        raise ConfigError([Problem(where, f"{text!r} is not a shard: needs n >= 1 and 0 <= i < n", _FIX)])
    return Shard(index, count)


def current_shard() -> Shard | None:
    """This process's shard: ``$TRANSFER_PLATFORM_SHARD`` (None: every recipient)."""
    return parse_shard(os.environ.get(ENV_VAR))


def shard_config(config: PlatformConfig, shard: Shard | None) -> PlatformConfig:
    """The share of ``config`` that ``shard`` holds: its recipients and their destinations (every
    source and model). ``None``: ``config`` itself."""
    if shard is None or shard.count == 1:
        return config
    recipients = [r for r in config.recipients if shard.holds(r.name)]
    names = {r.name for r in recipients}
    share = config.model_copy(update={"recipients": recipients,
                                      "destinations": [d for d in config.destinations if d.recipient in names]})
    for index in ("_destination_at", "_recipient_at"):  # look-up indexes of the whole file
        setattr(share, index, {})
    return share
