"""The shared Spark of the default mode: a Spark Connect server started in the background by the
first process that needs Spark, reused by every later one of the same configuration, stopped by
itself once idle.

Without ``spark.remote``, a process that transfers (a command line, a Dagster run) does not start
a Spark of its own (~11 s): it asks for the server of its **key** (the pyspark and
transfer_platform versions, the Python executable and the Spark JVM's settings,
:func:`~transfer_platform.runtime.spark_session.local_spark_conf`) and becomes its Connect client. Each
key has three files in the state folder (``$TRANSFER_PLATFORM_STATE_DIR``, else
``~/.cache/transfer_platform/spark``): ``<key>.json`` (the running server: pid, port, key fields,
log path; written by the server once it listens, removed when it stops), ``<key>.log`` (its
output) and ``<key>.lock``: a process holds an exclusive ``flock`` on it while it checks the
server, starts one if there is none and opens its session, so two commands started at once
start one server. A server of another key is never reused.

The server (``python -m transfer_platform.runtime.shared_spark <request>``, its own session and process
group) stops after ``spark.shared_idle_seconds`` without activity, read from its own JVM every
few seconds: no execution running (``SparkConnectExecutionManager.listActiveExecutions``), no
session used since (``SparkConnectSessionManager.listActiveSessions``' ``lastAccessTimeMs``), and
no open session whose client process still runs (each client names its pid in its Spark Connect
user id, ``transfer_platform_pid_<pid>``): a transfer busy in its destination for an hour keeps
the server. It decides to stop under the key's lock (no client is between its check and its
session then) and removes its state file first.

If the server cannot be started or reached, the process runs Spark inside itself, as with the
opt-out (``--no-shared-spark``, ``spark.shared: false``, ``$TRANSFER_PLATFORM_SHARED_SPARK=0``),
after one warning that says why and names the server's log.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transfer_platform.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


_LOG = logging.getLogger("transfer_platform.spark")

SHARED_ENV_VAR = "TRANSFER_PLATFORM_SHARED_SPARK"
STATE_DIR_ENV_VAR = "TRANSFER_PLATFORM_STATE_DIR"
#: the prefix of the Spark Connect user id in which a client names its process, so that the
#: server keeps running while that process lives (on this machine: it listens on 127.0.0.1 only)
CLIENT_USER_PREFIX = "transfer_platform_pid_"
#: the key of :func:`~transfer_platform.runtime.spark_session.spark_conf`'s settings that asks for the
#: shared server (its value: the idle seconds); never given to a Spark
SHARED_MARKER = "transfer_platform.shared_idle_seconds"
#: how long a client waits for a server it started to listen (a start takes ~10-20 s on 2 cores)
START_BOUND_S = 180.0
_ON = ("1", "true", "on", "yes")
_OFF = ("0", "false", "off", "no")
#: each server process this one started: kept so that Python does not warn about a child still
#: running when the object is collected (the server outlives this process on purpose)
_STARTED: list[subprocess.Popen] = []


class SharedServerUnavailable(Exception):
    """Why the shared server could not be used (the process then runs Spark itself)."""


def shared_from_env() -> bool | None:
    """``$TRANSFER_PLATFORM_SHARED_SPARK``: False (0/false/off/no), True (1/true/on/yes), None
    when unset or empty; anything else is a ConfigError naming the variable."""
    value = os.environ.get(SHARED_ENV_VAR, "").strip()
    if not value:
        return None
    if value.lower() in _OFF:
        return False
    if value.lower() in _ON:
        return True
    raise ConfigError(f"${SHARED_ENV_VAR}={value!r} is neither on nor off; fix: set it to 0 (each process "
                      f"runs its own Spark) or 1 (the shared Spark server, the default), or unset it")


def state_dir() -> Path:
    """``$TRANSFER_PLATFORM_STATE_DIR``, else ``~/.cache/transfer_platform/spark`` (the resident
    command process keeps its files there too)."""
    from transfer_platform.runtime.resident import state_folder

    return state_folder()


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transfer-platform")
    except PackageNotFoundError:
        return "unknown"


def server_key(conf: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """The key of the server that runs a Spark of these settings (``local_spark_conf``'s), and
    the fields it is made of: a server is reused only by clients of the same key."""
    import pyspark

    fields = {"pyspark": pyspark.__version__, "transfer_platform": _package_version(),
              "python": sys.executable, "conf": dict(sorted(conf.items()))}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return digest[:20], fields


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (a server this process started, gone, not yet reaped) is no server
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _is_server_of(pid: int, key: str) -> bool:
    """Whether ``pid`` runs the shared server of ``key`` (not another process that got the pid)."""
    if not _pid_alive(pid):
        return False
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: the pid alone
    return b"transfer_platform.runtime.shared_spark" in command and any(key.encode() in part for part in command)


def read_state(folder: Path, key: str) -> dict[str, Any] | None:
    try:
        return json.loads((folder / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None


def live_state(folder: Path, key: str) -> dict[str, Any] | None:
    """The state of the running server of ``key``: its pid runs that server, and its port
    accepts connections; None (after removing a stale file) otherwise."""
    from transfer_platform.config.endpoints import Endpoint
    from transfer_platform.runtime.spark_session import _refused

    state = read_state(folder, key)
    if state is None:
        return None
    if (state.get("key") == key and isinstance(state.get("pid"), int) and _is_server_of(state["pid"], key)
            and isinstance(state.get("port"), int)
            and _refused(Endpoint("127.0.0.1", state["port"]), timeout=2) is None):
        return state
    with contextlib.suppress(FileNotFoundError):
        (folder / f"{key}.json").unlink()
    return None


def _why(log: Path) -> str:
    """The most telling line of a server's output that ended early: its first exception or error
    with a message (the JVM reports the cause first), else its last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    for line in lines:
        if not line.startswith(("at ", "File ", "Traceback")) and re.search(r"(Exception|Error)\b[^:]*:\s+\S", line):
            return line[:400]
    return lines[-1][:400] if lines else ""


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(folder: Path, key: str, fields: dict[str, Any], conf: dict[str, str],
                 idle_seconds: int, bound_s: float = START_BOUND_S) -> dict[str, Any]:
    """Start the server of ``key`` (the caller holds the key's lock) in its own session and
    process group, and wait until it has written its state file (it listens then)."""
    log = folder / f"{key}.log"
    request = folder / f"{key}.start.json"
    port = _free_port()
    request.write_text(json.dumps({"key": key, "fields": fields, "conf": conf, "port": port,
                                   "idle_seconds": idle_seconds, "log": str(log)}))
    request.chmod(0o600)
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "TRANSFER_PLATFORM_SPARK_REMOTE")}
    try:
        with log.open("w") as output:
            process = subprocess.Popen([sys.executable, "-m", "transfer_platform.runtime.shared_spark", "serve", key,
                                        str(request)], stdin=subprocess.DEVNULL, stdout=output,
                                       stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=folder)
    except OSError as exc:
        raise SharedServerUnavailable(f"it could not be started ({exc})") from None
    _STARTED.append(process)
    deadline = time.monotonic() + bound_s
    while True:
        state = read_state(folder, key)
        if state is not None and state.get("pid") == process.pid:
            return state
        code = process.poll()
        if code is not None:
            why = _why(log)
            raise SharedServerUnavailable(f"it exited with status {code} before it listened"
                                          + (f" ({why})" if why else ""))
        if time.monotonic() > deadline:
            _kill_group(process.pid)
            raise SharedServerUnavailable(f"it did not listen within {bound_s:.0f} s (stopped)")
        time.sleep(0.2)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def shared_session(conf: dict[str, str], idle_seconds: int, warn: Callable[[str], None]) -> SparkSession | None:
    """A client session of the shared server for a Spark of these settings (started if there is
    none); None after one ``warn``ing that says why, when it cannot be used."""
    from transfer_platform.config.endpoints import Endpoint
    from transfer_platform.errors import TransferPlatformError
    from transfer_platform.runtime.spark_session import connect

    key, fields = server_key(conf)
    folder = state_dir()
    log = folder / f"{key}.log"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = folder / f"{key}.lock"
        with _locked(lock):
            state = live_state(folder, key)
            if state is None:
                state = start_server(folder, key, fields, conf, idle_seconds)
                _LOG.info("started the shared Spark server %s (pid %s, log %s)", state["url"], state["pid"], log)
            endpoint = Endpoint("127.0.0.1", state["port"])
            # the server keeps running while this process lives (a transfer busy elsewhere for long)
            session = connect(endpoint, user_id=f"{CLIENT_USER_PREFIX}{os.getpid()}")
            _LOG.info("using the shared Spark server %s (pid %s, key %s)", state["url"], state["pid"], key)
            return session
    except (SharedServerUnavailable, TransferPlatformError, OSError) as exc:
        for variable in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):  # a failed client's traces
            os.environ.pop(variable, None)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        warn(f"the shared Spark server could not be used: {reason}; its log: {log}. This process runs its "
             f"own Spark instead (about 11 s more). Fix: see the log; or opt out with --no-shared-spark, "
             f"spark.shared: false or ${SHARED_ENV_VAR}=0")
        return None


def stop_servers(folder: Path, bound_s: float = 60.0) -> list[dict[str, Any]]:
    """Stop every shared server recorded in ``folder`` (SIGTERM; each removes its state file as
    it stops; SIGKILL after ``bound_s``); their states. A transfer using one fails, as when any
    Spark Connect server stops (``SparkServerLost``)."""
    stopped = []
    for path in sorted(folder.glob("*.json")):
        key = path.stem
        state = live_state(folder, key)
        if state is None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(state["pid"], signal.SIGTERM)
        deadline = time.monotonic() + bound_s
        while _pid_alive(state["pid"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _pid_alive(state["pid"]):
            _kill_group(state["pid"])
        path.unlink(missing_ok=True)
        stopped.append(state)
    return stopped


# -- the server ------------------------------------------------------------------------------


def client_pid(user_id: str) -> int | None:
    """The client process a session's user id names (:data:`CLIENT_USER_PREFIX`), if any."""
    number = user_id[len(CLIENT_USER_PREFIX):] if user_id.startswith(CLIENT_USER_PREFIX) else ""
    return int(number) if number.isdigit() else None


class _IdleWatch:
    """Reads the Connect service's activity from its JVM (``SparkConnectService``'s execution and
    session managers) and tells when nothing happened for ``idle_seconds``."""

    def __init__(self, session: SparkSession, idle_seconds: int) -> None:
        jvm = session.sparkContext._jvm
        self._service = getattr(getattr(jvm.org.apache.spark.sql.connect.service, "SparkConnectService$"), "MODULE$")
        self.idle_seconds = idle_seconds
        self.last_activity = time.time()

    def busy(self) -> bool:
        """Whether a query runs or an open session's client process lives; also moves
        ``last_activity`` to the latest session access."""
        busy = False
        executions = self._service.listActiveExecutions()
        if executions.isRight() and executions.right().get().size() > 0:
            busy = True
        # read from the sessions' descriptions only: looking a session up (getIsolatedSession...)
        # would count as an access, and keep every session, a dead client's too, fresh forever
        sessions = self._service.sessionManager().listActiveSessions().iterator()
        while sessions.hasNext():
            info = sessions.next()
            self.last_activity = max(self.last_activity, info.lastAccessTimeMs() / 1000)
            pid = client_pid(info.userId())
            if pid is not None and _pid_alive(pid):
                busy = True
        if busy:
            self.last_activity = time.time()
        return busy

    def idle(self) -> bool:
        return not self.busy() and time.time() - self.last_activity >= self.idle_seconds


def _say(line: str) -> None:
    """A line of the server's log (its stdout)."""
    sys.stdout.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")
    sys.stdout.flush()


def serve_shared(key: str, request_path: Path) -> int:
    """The shared server of ``key``: listen as the request says, write the state file once
    listening, stop after the idle time (or on SIGTERM/SIGINT), removing the state file."""
    from transfer_platform.config.endpoints import Endpoint
    from transfer_platform.runtime.spark_session import serve

    request = json.loads(request_path.read_text())
    request_path.unlink(missing_ok=True)
    folder = request_path.parent
    state_path = folder / f"{key}.json"
    idle_seconds = int(request["idle_seconds"])
    pid = os.getpid()

    def ready(message: str) -> None:
        state = {"pid": pid, "port": request["port"], "url": f"sc://127.0.0.1:{request['port']}", "key": key,
                 "fields": request["fields"], "log": request["log"], "idle_seconds": idle_seconds,
                 "started_at": time.time()}
        partial = folder / f"{key}.json.{pid}"
        partial.write_text(json.dumps(state, indent=1))
        partial.replace(state_path)
        _say(f"{message}; shared server of key {key}, stops after {idle_seconds} s idle")

    def forget() -> None:
        if (read_state(folder, key) or {}).get("pid") == pid:
            state_path.unlink(missing_ok=True)

    def stop_when_idle(session: SparkSession) -> Callable[[], bool]:
        watch = _IdleWatch(session, idle_seconds)

        def check() -> bool:
            if not watch.idle():
                return False
            with _locked(folder / f"{key}.lock"):  # no client between its check and its session now
                if watch.idle():
                    forget()
                    _say(f"idle for {idle_seconds} s: stopping")
                    return True
            return False
        return check

    try:
        serve(None, Endpoint("127.0.0.1", request["port"]), ready=ready, conf=request["conf"],
              stop_when=stop_when_idle, poll_seconds=max(1.0, min(30.0, idle_seconds / 10)))
    finally:
        forget()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "serve":
        sys.stderr.write("usage: python -m transfer_platform.runtime.shared_spark serve KEY REQUEST_FILE\n")
        return 2
    return serve_shared(argv[1], Path(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
