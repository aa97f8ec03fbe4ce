"""The provider's policy on the addresses a destination may reach, checked at every connection.

A recipient is an outside party: through a magic link it chooses where the platform connects,
from inside the provider's network. A destination under the policy (entered through a magic
link; any destination when ``destination_addresses.check_provider_destinations`` is on) may
reach only global addresses: not loopback, private (RFC 1918, unique-local ``fc00::/7``),
link-local (``169.254.0.0/16`` with the cloud metadata address, ``fe80::/10``), shared,
unspecified, multicast or reserved ones, nor the host:port of the platform's own store,
Dagster storage and sources, unless ``destination_addresses.allow`` opens them; and no local
file path (DuckDB's, an embedded ClickHouse's, a local folder) unless ``allow_local_paths``.

How it holds at each connection, DNS rebinding included:

- :func:`guard` runs whenever a destination's writer is made (``writer_for``: every transfer,
  ``test-connection``, the magic-link form's and the API's tests) and when the API saves a
  destination: it resolves every host and endpoint of the destination with
  ``socket.getaddrinfo`` and checks **every** address, before any connection is tried. A
  refused address, or a name that does not resolve, gets one message (:data:`REFUSED`): the
  same whether or not anything listens there, since nothing was asked of it.
- The destination's own database connection settings carry its policy (:func:`apply_policy`
  marks them, and the mark travels with them, into Spark's Python workers too): every
  connection opened from them gets an address checked at that moment, never the name. libpq
  (psycopg) gets ``hostaddr=<checked address>`` beside ``host`` (kept for TLS,
  :func:`pinned_hostaddr`); PyMySQL and the MariaDB JDBC driver that Spark's executors use to
  read back a MySQL destination get the checked address as their host (:func:`pinned_host`; the
  platform's MySQL connections use no TLS name check). Settings without the mark (the sources',
  the store's, a provider's destination) are never judged, whatever host they name.
- Python clients that open their connections from their own thread pools (urllib3 under boto3,
  requests, the Google and Snowflake clients, clickhouse-connect, paramiko), which neither a
  settings object nor a context variable reaches, resolve through the process's
  ``socket.getaddrinfo`` (wrapped once, :func:`_checked_getaddrinfo`). It checks the answers for
  the *host:port pairs* of guarded destinations, so an answer that changes after the first check
  is refused at the connection that would use it. A pair the provider's own connections use
  (the store, the sources, Dagster's storage, a destination of the provider's not under the
  policy) is never registered: the same host name at another port, or the same pair opened by
  the provider, is not judged.
- Clients with a resolver of their own in another language (delta-rs' object store, pyarrow's
  S3 file system) are covered by the check at the start of every transfer only.

A refusal names the setting (``destinations.acme.connection.host``), blames whoever entered it
(the recipient for a magic link's destination, the provider for its own under
``check_provider_destinations``) and tells that party how to fix it (:class:`AddressRefused`).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from transfer_platform.errors import ConfigError, Problem, one_line

#: the one answer for every refused address (nothing in it depends on what is at the address)
REFUSED = "is not an address this platform may connect to for this destination (or it does not resolve)"
REFUSED_PATH = "is a file or folder on the platform's own machine, which this destination may not choose"
#: how to fix a refusal, told to whoever entered the destination
FIXES = {
    "recipient": {
        "host": "give the public name or address of your own server; if it must be another, ask the provider "
                "to allow it (destination_addresses.allow)",
        "path": "write to your own server or bucket instead; ask the provider if it must be a local path",
    },
    "provider": {
        "host": "point the destination at the recipient's own server, or open this address for destinations "
                "under the policy (destination_addresses.allow in the configuration file)",
        "path": "write to the recipient's own server or bucket, or allow local paths for destinations under "
                "the policy (destination_addresses.allow_local_paths)",
    },
}


class AddressRefused(ConfigError):
    """A destination's address or path that its policy refuses: one line per refused setting,
    blaming whoever entered the destination (``entered_by``: ``recipient`` or ``provider``)."""

    def __init__(self, problems: list[Problem], *, entered_by: str) -> None:
        super().__init__(problems)
        self.blame = entered_by
        self.args = (one_line(self),)

    def __str__(self) -> str:
        return str(self.args[0])


def refused(where: str, entered_by: str, *, path: bool = False) -> Problem:
    """The problem of one refused setting ``where``, its fix told to ``entered_by``."""
    return Problem(where, REFUSED_PATH if path else REFUSED, FIXES[entered_by]["path" if path else "host"])

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_allowed(text: str) -> tuple[Network, int | None]:
    """An allow-list entry: an address or network, with a port or without (any port):
    ``10.1.0.0/16``, ``127.0.0.1:5432``, ``[::1]:5432``, ``fd00::/8``. ``ValueError`` otherwise."""
    value, port = text.strip(), None
    if value.startswith("["):
        inside, _, rest = value[1:].partition("]")
        if rest:
            if not rest.startswith(":") or not rest[1:].isdigit():
                raise ValueError(f"{text!r}: write [address]:port")
            port = int(rest[1:])
        value = inside
    elif value.count(":") == 1:
        value, _, port_text = value.partition(":")
        if not port_text.isdigit():
            raise ValueError(f"{text!r}: the port must be a number")
        port = int(port_text)
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{text!r}: the port must be between 1 and 65535")
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not an address or network (such as 10.1.0.0/16, 127.0.0.1:5432 "
                         "or [::1]:5432): give addresses, not host names") from None
    return network, port


def _address(text: str) -> Address:
    address = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 scope (fe80::1%eth0) dropped
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class AddressPolicy:
    """What a destination under the policy may reach: global addresses except ``own`` (the
    platform's own host:port pairs), and whatever ``allow`` opens."""

    allow: tuple[tuple[Network, int | None], ...] = ()
    own_pairs: tuple[tuple[str, int], ...] = ()  # host:port of the store, Dagster's storage, the sources
    allow_local_paths: bool = False
    #: who enters the destinations under it: ``recipient`` (a magic link) or ``provider``
    entered_by: str = "recipient"

    @cached_property
    def own(self) -> frozenset[tuple[Address, int]]:
        """The addresses of :attr:`own_pairs` (resolved once, at the first check)."""
        return own_addresses(self.own_pairs)

    def allows(self, address: Address, port: int | None) -> bool:
        for network, allowed_port in self.allow:
            # a look-up without a port (a family check) connects nowhere: any port of the entry
            port_allowed = allowed_port is None or port is None or allowed_port == port
            if address.version == network.version and address in network and port_allowed:
                return True
        if (address, port) in self.own:
            return False
        return address.is_global and not address.is_multicast


def _port(port: Any) -> int | None:
    if isinstance(port, int):
        return port
    if isinstance(port, (str, bytes)) and port.isdigit():
        return int(port)
    return None


def _name(host: Any) -> str:
    text = host.decode("idna", "replace") if isinstance(host, bytes) else str(host)
    return text.strip("[]").rstrip(".").lower()


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (``socket.getaddrinfo``, not wrapped); ``[]`` when it
    does not resolve."""
    try:
        infos = _original_getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def check(host: str, port: int, policy: AddressPolicy, where: str) -> list[str]:
    """``host``'s addresses, each checked against ``policy``: :class:`AddressRefused` naming
    ``where`` (the field, ``destinations.acme.connection.host``) with :data:`REFUSED` if one is
    refused or none resolves. Nothing connects to them."""
    addresses = resolve(host, port)
    if not addresses or not all(policy.allows(_address(a), port) for a in addresses):
        raise AddressRefused([refused(where, policy.entered_by)], entered_by=policy.entered_by)
    return addresses


# -- the destination's hosts, endpoints and paths ------------------------------------------------------


@dataclass
class Targets:
    hosts: list[tuple[str, int, str]] = field(default_factory=list)  # host, port, field path
    paths: list[str] = field(default_factory=list)  # field paths of local paths


_URL_FIELDS = ("endpoint_url", "api_endpoint")


def targets(destination: Any, at: str | None = None) -> Targets:
    """Every host (with its port), endpoint URL and local path of a destination's settings,
    each named by its field (under ``at``, default ``destinations.<name>``)."""
    found = Targets()
    default_port = getattr(getattr(destination, "vendor_record", None), "default_port", None)  # read, not imported

    def walk(value: Any, at: str) -> None:
        fields = getattr(type(value), "model_fields", None)
        if fields is None:
            return
        host = getattr(value, "host", None) if "host" in fields else None
        if isinstance(host, str) and host:
            port = next((getattr(value, n) for n in ("server_port", "port") if n in fields and getattr(value, n)),
                        None) or default_port
            if isinstance(port, int):
                found.hosts.append((host, port, f"{at}.host"))
        for name in fields:
            item = getattr(value, name, None)
            where = f"{at}.{fields[name].alias or name}"
            if name in _URL_FIELDS and isinstance(item, str):
                url = urlsplit(item)
                if url.hostname:
                    try:
                        port = url.port or (443 if url.scheme == "https" else 80)
                    except ValueError:
                        port = 443
                    found.hosts.append((url.hostname, port, where))
            elif isinstance(item, Path):
                found.paths.append(where)
            elif name != "host":
                walk(item, where)

    walk(destination, at or f"destinations.{getattr(destination, 'name', '?')}")
    return found


# -- at every connection ------------------------------------------------------------------------------

_original_getaddrinfo = socket.getaddrinfo
_lock = threading.Lock()
#: (host name, port) -> the policy its answers are checked against (pairs of destinations under
#: the policy that no connection of the provider's own uses)
_guarded: dict[tuple[str, int], AddressPolicy] = {}
#: (host name, port) of the provider's own connections seen by :func:`apply_policy` (its store,
#: sources, Dagster's storage, destinations not under the policy): never judged
_providers: set[tuple[str, int]] = set()


def _checked_getaddrinfo(host, port, *args, **kwargs):  # socket.getaddrinfo's signature
    infos = _original_getaddrinfo(host, port, *args, **kwargs)
    number = _port(port)
    policy = _guarded.get((_name(host), number)) if host is not None and number is not None else None
    if policy is not None:
        for info in infos:
            if not policy.allows(_address(str(info[4][0])), number):
                raise socket.gaierror(socket.EAI_NONAME, f"{_name(host)}:{number} {REFUSED}")
    return infos


def _install() -> None:
    with _lock:
        if socket.getaddrinfo is not _checked_getaddrinfo:
            socket.getaddrinfo = _checked_getaddrinfo


@dataclass(frozen=True)
class Guard:
    """The mark :func:`apply_policy` puts on a guarded destination's database connection
    settings: the policy, and the setting its host is (named in a refusal)."""

    policy: AddressPolicy
    where: str


def guard(destination: Any, at: str | None = None) -> None:
    """Check every host, endpoint and path of ``destination`` against its policy (none: nothing
    to do) and have every later resolution of its host:port pairs checked (those no connection
    of the provider's own uses); :class:`AddressRefused` naming each refused field (under
    ``at``, as :func:`targets`)."""
    policy = getattr(destination, "address_policy", None)
    if policy is None:
        return
    found = targets(destination, at)
    problems = [] if policy.allow_local_paths else [refused(at, policy.entered_by, path=True) for at in found.paths]
    for host, port, at in found.hosts:
        try:
            check(host, port, policy, at)
        except AddressRefused as exc:
            problems.extend(exc.problems)
    if problems:
        raise AddressRefused(problems, entered_by=policy.entered_by)
    _install()
    own = {(_name(host), port) for host, port in policy.own_pairs}
    with _lock:
        for host, port, _ in found.hosts:
            pair = (_name(host), port)
            if pair not in own and pair not in _providers:
                _guarded[pair] = policy


def _checked_address(connection: Any) -> str | None:
    """The first address of a guarded destination's ``connection`` (its settings: ``host``,
    ``port``, and the :class:`Guard` :func:`apply_policy` marked it with), checked now; ``None``
    for settings without the mark (a source's, the store's, a provider's destination)."""
    mark = getattr(connection, "address_guard", None)
    if mark is None:
        return None
    return check(connection.host, connection.port, mark.policy, mark.where)[0]


def pinned_hostaddr(connection: Any) -> dict[str, str]:
    """``{"hostaddr": <checked address>}`` for libpq when ``connection`` belongs to a guarded
    destination (libpq resolves in C, past Python's resolver); ``{}`` otherwise."""
    address = _checked_address(connection)
    return {} if address is None else {"hostaddr": address}


def pinned_host(connection: Any) -> str:
    """``connection``'s host, or its checked address when it belongs to a guarded destination
    (for clients that run where this process's resolver does not: Spark's Python workers, its
    JVM)."""
    address = _checked_address(connection)
    return connection.host if address is None else address


def own_addresses(pairs: Iterable[tuple[str, int]]) -> frozenset[tuple[Address, int]]:
    """The addresses of the platform's own host:port pairs (names resolved now)."""
    own = set()
    for host, port in pairs:
        for address in resolve(host, port):
            own.add((_address(address), port))
    return frozenset(own)


def dagster_storage_pairs() -> list[tuple[str, int]]:
    """The host:port of the Dagster instance's PostgreSQL storage (``$DAGSTER_HOME/dagster.yaml``'s
    ``storage.postgres`` or a ``*_storage`` with ``postgres_db``; its ``postgres_url``)."""
    import os

    import yaml

    home = os.environ.get("DAGSTER_HOME")
    try:
        document = yaml.safe_load(Path(home, "dagster.yaml").read_text()) if home else None
    except (OSError, yaml.YAMLError):
        return []
    found: list[tuple[str, int]] = []

    def value(item: Any) -> Any:
        return os.environ.get(item["env"]) if isinstance(item, dict) and "env" in item else item

    def walk(item: Any) -> None:
        if isinstance(item, dict):
            url = value(item.get("postgres_url"))
            if isinstance(url, str):
                parts = urlsplit(url)
                if parts.hostname:
                    found.append((parts.hostname, parts.port or 5432))
            db = item.get("postgres_db")
            if isinstance(db, dict) and isinstance(value(db.get("hostname")), str):
                port = value(db.get("port")) or 5432
                found.append((value(db["hostname"]), int(port) if str(port).isdigit() else 5432))
            for each in item.values():
                walk(each)
        elif isinstance(item, list):
            for each in item:
                walk(each)

    walk(document)
    return found


def apply_policy(config: Any, linked: Iterable[str]) -> None:
    """Give each destination of ``config`` the policy it follows: those entered through a magic
    link (``linked``, their names: entered by the recipient), and every other when
    ``check_provider_destinations`` is on (entered by the provider); ``None`` for the rest (not
    checked). Each guarded destination's database connection settings are marked
    (:class:`Guard`), and the host:port pairs of the provider's own connections remembered, so
    that only the connections a destination under the policy opens are judged by it."""
    settings = config.destination_addresses
    linked = set(linked)
    pairs = [] if config.store is None else [(config.store.connection.host, config.store.connection.port)]
    for source in config.sources:
        connection = getattr(source, "connection", None)
        if isinstance(getattr(connection, "host", None), str) and isinstance(getattr(connection, "port", None), int):
            pairs.append((connection.host, connection.port))
    policy = None
    if linked or settings.check_provider_destinations:
        policy = AddressPolicy(allow=tuple(parse_allowed(a) for a in settings.allow),
                               own_pairs=tuple(dict.fromkeys([*pairs, *dagster_storage_pairs()])),
                               allow_local_paths=settings.allow_local_paths)
    providers = {(_name(host), port) for host, port in pairs}
    policies = {} if policy is None else {who: replace(policy, entered_by=who) for who in ("recipient", "provider")}
    for destination in config.destinations:
        entered_by = "recipient" if destination.name in linked else "provider"
        under = entered_by == "recipient" or settings.check_provider_destinations
        followed = policies.get(entered_by) if under else None
        if followed is not None or destination._address_policy is not None:  # else: never marked
            _mark(destination, followed)
        destination._address_policy = followed
        if followed is None and policy is not None:  # a provider's destination beside guarded ones
            providers.update((_name(host), port) for host, port, _ in targets(destination).hosts)
    with _lock:
        _providers.update(providers)
        if policy is None:  # no destination is under the policy: no pair is judged
            _guarded.clear()
        for pair in providers:
            _guarded.pop(pair, None)


def _mark(destination: Any, policy: AddressPolicy | None) -> None:
    """Mark ``destination``'s settings objects that carry an address guard (its database
    connection settings, an Iceberg catalog's) with ``policy`` and the setting they are."""

    def walk(value: Any, at: str) -> None:
        fields = getattr(type(value), "model_fields", None)
        if fields is None:
            return
        if "_address_guard" in getattr(type(value), "__private_attributes__", {}):
            value._address_guard = None if policy is None else Guard(policy, f"{at}.host")
        for name in fields:
            walk(getattr(value, name, None), f"{at}.{fields[name].alias or name}")

    walk(destination, f"destinations.{getattr(destination, 'name', '?')}")
