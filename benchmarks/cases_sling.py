"""Sling (the binary of the pinned ``sling-linux-amd64`` wheel, run directly as a subprocess)
doing the same copies: one replication file, the source stream ``<SCHEMA>.events`` filtered to
one tenant (``where``), mode ``incremental`` with primary key ``id`` and update key
``updated_at``, into ``<SCHEMA>_sling_<i>.events`` (Sling creates the schema and the table on its
first run: that run is the backfill; later runs read the rows with ``updated_at`` past the
target's newest and merge them on ``id``). Everything else is Sling's default.

Sling is kept on the machine: its environment is built from nothing (:func:`sling_environment`):
telemetry off (``SLING_DISABLE_TELEMETRY=true``: no usage events, no error reports), its update
check (an HTTPS request to api.github.com, made by some runs) sent through ``HTTPS_PROXY`` /
``HTTP_PROXY`` pointing at a closed port of 127.0.0.1 (it fails at once, before any name is
resolved), ``HOME`` and ``SLING_HOME_DIR`` in a temporary folder (no ``~/.sling`` of the user's:
no stored connections, no env file). :func:`network_check` runs Sling under ``strace`` and lists
every ``connect()`` it made that is not to a loopback address or a Unix socket.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import yaml

from benchmarks.common import PG_URL, SCHEMA

PREFIX = f"{SCHEMA}_sling"
#: the connections' names in the replication file; their URLs are environment variables
SOURCE_CONN, TARGET_CONN = "TP_BENCH_SOURCE", "TP_BENCH_TARGET"
CONNECTION_URL = f"{PG_URL}?sslmode=disable"


def binary() -> str:
    """The Sling binary the ``sling-linux-amd64`` wheel ships (bench dependency group)."""
    import sling_linux_amd64

    path = sling_linux_amd64.SLING_BIN
    if not path or not os.access(path, os.X_OK):
        raise RuntimeError(f"no Sling binary at {path!r}: run `bash scripts/dev setup` (the bench group)")
    return path


def version() -> str:
    import sling_linux_amd64

    return sling_linux_amd64.SLING_VERSION


def schema(index: int) -> str:
    return f"{PREFIX}_{index}"


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def sling_environment(folder: Path, port: int | None = None) -> dict[str, str]:
    """Sling's whole environment (nothing inherited but ``PATH``): no telemetry, HTTP(S) only
    through a closed local port, its home in ``folder``, the two connections' URLs."""
    port = closed_port() if port is None else port
    proxy = f"http://127.0.0.1:{port}"
    home = folder / "sling_home"
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder), "SLING_HOME_DIR": str(home),
            "SLING_DISABLE_TELEMETRY": "true", "SLING_SHOW_PROGRESS": "false", "DO_NOT_TRACK": "1",
            "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "https_proxy": proxy, "http_proxy": proxy,
            "NO_PROXY": "", "no_proxy": "",
            SOURCE_CONN: CONNECTION_URL, TARGET_CONN: CONNECTION_URL}


def write_replication(folder: Path, source_table: str, tenant: str, index: int) -> Path:
    """The replication file: one stream, one tenant, incremental on ``updated_at``, merge on ``id``."""
    path = folder / f"sling_{index}.yaml"
    path.write_text(yaml.safe_dump({
        "source": SOURCE_CONN, "target": TARGET_CONN,
        "defaults": {"mode": "incremental", "primary_key": ["id"], "update_key": "updated_at"},
        "streams": {source_table: {"object": f"{schema(index)}.events",
                                   "where": f"tenant_id = '{tenant}'"}}}))
    return path


def sling_run(replication: Path, env: dict[str, str], *, prefix: tuple[str, ...] = ()) -> str:
    """``sling run -r <replication>``; raises with Sling's output if it did not succeed."""
    done = subprocess.run([*prefix, binary(), "run", "-r", str(replication)], capture_output=True, text=True,
                          env=env, cwd=env["HOME"], check=False)
    output = done.stdout + done.stderr
    if done.returncode != 0 or "execution succeeded" not in output:
        raise RuntimeError(f"sling run failed ({done.returncode}): {output[-3000:]}")
    return output


CONNECT = re.compile(r"connect\(\d+, \{sa_family=(AF_INET6?|AF_UNIX)(.*?)\}")
INET = re.compile(r'sin6?_port=htons\((\d+)\).*?(?:inet_addr\(|inet_pton\(AF_INET6?, )"([^"]+)"')


def connects(trace: str) -> list[tuple[str, str, int]]:
    """(family, address, port) of every ``connect()`` in an ``strace -e trace=connect`` log."""
    found = []
    for family, rest in CONNECT.findall(trace):
        if family == "AF_UNIX":
            found.append((family, re.search(r'sun_path="?([^",]*)', rest).group(1), 0))
        else:
            match = INET.search(rest)
            found.append((family, match.group(2), int(match.group(1))) if match else (family, rest, 0))
    return found


def is_local(family: str, address: str) -> bool:
    return family == "AF_UNIX" or address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1")


def start_at_second(remainder: int) -> None:
    """Wait for the start of a wall-clock second whose number is ``remainder`` modulo 4."""
    while True:
        now = time.time()
        if int(now) % 4 == remainder and now - int(now) < 0.05:
            return
        time.sleep(min(0.02, 1 - (now - int(now))))


def network_check(replication: Path, folder: Path, attempts: int = 4) -> dict:
    """Run Sling (one incremental) under ``strace -f -e trace=connect`` up to ``attempts`` times,
    until one run tried its update check (a connect to the closed proxy port); every connect it
    made, and those leaving the machine (must be none). Sling checks for updates in runs whose
    check falls in a second divisible by 4: the attempts start at seconds 0, 3, 2, 1 modulo 4,
    so that one of them does."""
    strace = shutil.which("strace")
    if strace is None:
        return {"checked_with": None, "note": "strace is not installed: not checked"}
    port = closed_port()
    env = sling_environment(folder, port)
    seen: set[tuple[str, str, int]] = set()
    proxy_attempts = runs = 0
    for attempt in range(attempts):
        log = folder / f"sling_strace_{attempt}.log"
        start_at_second((4 - attempt) % 4)
        sling_run(replication, env, prefix=(strace, "-f", "-qq", "-e", "trace=connect", "-o", str(log)))
        found = connects(log.read_text())
        runs += 1
        seen.update(found)
        proxy_attempts += sum(1 for f, a, p in found if a == "127.0.0.1" and p == port)
        if proxy_attempts:
            break
    return {"checked_with": "strace -f -e trace=connect", "runs": runs,
            "update_check_sent_to_closed_proxy": proxy_attempts,
            "destinations": sorted(f"{f} {a}" + (f":{p}" if p else "") for f, a, p in seen),
            "non_loopback": sorted(f"{f} {a}:{p}" for f, a, p in seen if not is_local(f, a))}
