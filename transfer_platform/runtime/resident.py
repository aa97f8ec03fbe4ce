"""The resident command process: ``transfer-platform`` commands forked from a Python that has
already imported the data path.

A command of the command line that needs Spark pays its Python's imports before it moves a row:
about 0.85 s of a 1.4 s small incremental on a quiet 2-core machine (pydantic's configuration
models, the Spark Connect client with pandas, gRPC and protobuf, pyarrow), against a floor of
0.25 s for the same rows. So, like the shared Spark server (:mod:`transfer_platform.runtime.shared_spark`)
and the preloaded parent of Dagster's runs (:mod:`transfer_platform.orchestration.speed.run_worker`, the
same fork server: :mod:`transfer_platform.runtime.forks`):

1. ``transfer-platform`` (:func:`forward`, called by :mod:`transfer_platform.executable` with the
   :class:`Command` a resident process runs: the command line's) first asks, with the standard library only, whether the
   command is one that is *forwarded* (:data:`FORWARDED`: the commands that read the
   configuration and may start Spark) and whether a resident process of this Python and this
   code listens on its socket in the state folder (``$TRANSFER_PLATFORM_STATE_DIR``, as the
   shared Spark server's): ``commands-<key>.sock``, the key a hash of the Python, its
   ``PYTHONPATH`` and the package's folder.
2. If one listens, the command is sent to it: its arguments, working directory, umask and
   environment (over the socket, which only this user can open), and its standard input, output
   and error themselves (the file descriptors, ``SCM_RIGHTS``). The resident process forks; the
   fork takes those descriptors, directory, umask and environment and runs the command exactly
   as the command line's ``main`` does (its exit handlers included; the resident process runs
   what its :class:`Command` names, and imports nothing of the command line itself); its output goes straight to
   the caller's terminal or pipes. The caller waits for the exit code, and passes on SIGINT,
   SIGTERM, SIGHUP and SIGQUIT to the fork (Ctrl-C
   stops a transfer as it does in-process). A caller that goes away (killed) has its fork
   interrupted as by Ctrl-C.
3. If none listens, the command runs in its own process, after starting a resident
   process in the background for the next commands (it does not wait for it). Two commands
   starting at once start one: the resident process holds an exclusive ``flock`` on
   ``commands-<key>.lock`` for its life, and a second one exits.
4. The resident process refuses a command (which then runs in its caller's process) when the
   package's files changed since it imported them (it then exits and the next command starts a
   fresh one) or when a thread runs in it (a fork would carry a broken copy); it forks nothing
   else, opens no connection and starts no thread. It exits after
   ``$TRANSFER_PLATFORM_COMMAND_SERVER_IDLE_SECONDS`` (default 1800) without a command, on
   SIGTERM, or with ``transfer-platform spark-server --stop``.

Off with the shared Spark server: ``--no-shared-spark`` on the command, or
``$TRANSFER_PLATFORM_SHARED_SPARK=0`` (the test suite's setting). ``python -m
transfer_platform.cli`` never forwards.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import importlib
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from transfer_platform.runtime.forks import ForkServer, package_stamp, ready, warm

#: the commands a resident process runs: those that read the configuration and may start Spark
FORWARDED = frozenset({"transfer", "integrity", "sweep-deletes", "test-connection", "validate"})
IDLE_ENV_VAR = "TRANSFER_PLATFORM_COMMAND_SERVER_IDLE_SECONDS"
#: a resident process's log (two lines a command) is started afresh by the next one past this size
LOG_KEPT_BYTES = 1 << 20
DEFAULT_IDLE_SECONDS = 1800
#: signals the caller passes on to the command's fork
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
#: the environment a resident process is started with (the commands get their callers' own)
_SERVER_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR", "XDG_CACHE_HOME",
               "TRANSFER_PLATFORM_STATE_DIR", IDLE_ENV_VAR)
_GLOBAL_WITH_VALUE = ("--config",)
_SOCKET_PATH_MAX = 100  # AF_UNIX's sun_path holds 108 bytes
_ON = ("", "1", "true", "on", "yes")


class Command(NamedTuple):
    """What a resident process runs, given by the command line (the runtime imports nothing of
    it): ``run``, called in a fork with a command's arguments, returns its exit code; ``warm``:
    what the resident process imports before it forks (a missing one is skipped); ``pointer``:
    where this object is (``module:NAME``), for the resident process to find it. (A named tuple,
    not a dataclass: the caller's side imports nothing it does not need.)"""

    pointer: str
    run: Callable[[list[str]], int]
    warm: tuple[str, ...] = ()


def command_at(pointer: str) -> Command:
    """The :class:`Command` a pointer (``module:NAME``) names."""
    module, _, name = pointer.partition(":")
    return getattr(importlib.import_module(module), name)


# -- the caller ------------------------------------------------------------------------------


def command_of(argv: list[str]) -> str | None:
    """The subcommand of ``argv``: its first word that is neither an option nor an option's value."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in _GLOBAL_WITH_VALUE:
            skip = True
        elif not word.startswith("-"):
            return word
    return None


def forwarded(argv: list[str], environ: dict[str, str] | os._Environ = os.environ) -> bool:
    """Whether this command goes to a resident process (if one listens)."""
    if command_of(argv) not in FORWARDED or "--no-shared-spark" in argv:
        return False
    # off, or a value that is neither on nor off (the command refuses it, in its own process)
    return environ.get("TRANSFER_PLATFORM_SHARED_SPARK", "").strip().lower() in _ON


def state_folder() -> Path:
    """Where the shared Spark servers and the resident command process keep their files."""
    configured = os.environ.get("TRANSFER_PLATFORM_STATE_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "transfer_platform" / "spark"


def server_key() -> str:
    """Which resident process may run this caller's commands: the same Python, ``PYTHONPATH``
    and package folder (a fork runs the code its parent imported; a change of that code is seen
    by the resident process itself, which then refuses and exits)."""
    fields = [sys.executable, os.environ.get("PYTHONPATH", ""), str(Path(__file__).resolve().parent)]
    return hashlib.sha256("\0".join(fields).encode()).hexdigest()[:16]


def socket_path(folder: Path | None = None) -> Path:
    return (folder or state_folder()) / f"commands-{server_key()}.sock"


def forward(argv: list[str], command: Command) -> int | None:
    """The exit code of ``argv`` run by the resident process (of ``command``); ``None`` when it
    is to run here (not forwarded, no resident process, or refused). Once the resident process
    forked the command, its result is final: a command never runs twice."""
    if not forwarded(argv):
        return None
    try:
        path = socket_path()
        if len(str(path)) > _SOCKET_PATH_MAX:
            return None
        caller = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    with caller:
        try:
            caller.connect(str(path))
        except OSError:  # none listens (or a dead one's socket file): start one for the next commands
            start_server(path, command)
            return None
        return _served(caller, argv, path, command)


def _served(caller: socket.socket, argv: list[str], path: Path, command: Command) -> int | None:
    pending: list[int] = []
    child: list[int] = []

    def pass_on(signum: int, frame: Any) -> None:
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child[0], signum)
        else:
            pending.append(signum)

    previous = {signum: signal.signal(signum, pass_on) for signum in PASSED_ON}
    try:
        try:
            socket.send_fds(caller, [b"\0"], [0, 1, 2])
            umask = os.umask(0o022)  # read (and put back): files the command creates get the caller's mode
            os.umask(umask)
            request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask}
            caller.sendall(json.dumps(request).encode() + b"\n")
            answers = caller.makefile("rb")
            first = json.loads(answers.readline() or b"{}")
        except (OSError, ValueError):
            return 130 if pending else None  # Ctrl-C before anything ran: the command does not run
        if "pid" not in first:  # refused (stale code, a thread): run here; a stale one has gone
            if first.get("refused") == "stale":
                start_server(path, command)
            return 130 if pending else None
        child.append(int(first["pid"]))
        for signum in pending:
            pass_on(signum, None)
        try:
            line = answers.readline()
            return int(json.loads(line)["exit"])
        except (OSError, ValueError, KeyError):
            print("error: the resident transfer-platform process went away before the command ended; "
                  "run it again (or with --no-shared-spark)", file=sys.stderr)
            return 1
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def start_server(path: Path, command: Command) -> None:
    """Start a resident process of ``command`` for ``path`` in the background (it exits at once
    if another holds the lock); never waits for it."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        env = {k: v for k in _SERVER_ENV if (v := os.environ.get(k)) is not None}
        log_path = path.with_suffix(".log")
        kept = log_path.exists() and log_path.stat().st_size < LOG_KEPT_BYTES  # else started afresh
        with open(log_path, "ab" if kept else "wb") as log:
            subprocess.Popen([sys.executable, "-m", "transfer_platform.runtime.resident", str(path), command.pointer],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True, close_fds=True)


# -- the resident process --------------------------------------------------------------------

def idle_seconds() -> float:
    value = os.environ.get(IDLE_ENV_VAR, "").strip()
    try:
        return float(value) if value else DEFAULT_IDLE_SECONDS
    except ValueError:
        return DEFAULT_IDLE_SECONDS


def _say(text: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _held_lock(path: Path) -> Iterator[Any]:
    """The lock of ``path``'s resident process (its open file, the pid written in it); ``None``
    if another process holds it."""
    with open(path.with_suffix(".lock"), "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield handle


class Server(ForkServer[socket.socket | None]):
    """Accepts commands on a socket and runs each in a fork (see the module's docstring); its
    children: pid -> the fork's caller (None: the caller left)."""

    def __init__(self, path: Path, idle: float, command: Command, module: str = "transfer_platform") -> None:
        super().__init__(lambda: package_stamp(module))
        self.path, self.idle, self.command, self.module = path, idle, command, module
        self.last_activity = time.monotonic()
        self.stopping = False
        self.handed_over = False  # stale: its socket and lock left to the next resident process

    def serve(self) -> int:
        with _held_lock(self.path) as self.lock:
            if self.lock is None:
                _say("another resident process holds the lock: exiting")
                return 0
            started = time.perf_counter()
            warm(self.command.warm)
            self.remember_code()
            self.freeze()  # ahead of the first command, whose fork then finds little to collect
            self.wake, wake_write = os.pipe()
            os.set_blocking(wake_write, False)
            signal.set_wakeup_fd(wake_write)
            signal.signal(signal.SIGCHLD, lambda *_: None)
            signal.signal(signal.SIGTERM, self._stop)
            signal.signal(signal.SIGINT, self._stop)
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old_mask = os.umask(0o177)
            try:
                listener.bind(str(self.path))
            finally:
                os.umask(old_mask)
            listener.listen(64)
            _say(f"listening on {self.path} ({time.perf_counter() - started:.2f} s of imports, "
                 f"stops after {self.idle:g} s without a command)")
            try:
                self._loop(listener, self.wake)
            finally:
                if not self.handed_over:  # else the socket there is its successor's
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()
                listener.close()
            self.reap_all()  # the callers still wait for these
            return 0

    def _stop(self, signum: int, frame: Any) -> None:
        self.stopping = True
        _say(f"{signal.Signals(signum).name}: exiting")

    def _loop(self, listener: socket.socket, wake: int) -> None:
        while not self.stopping:
            callers = {c: pid for pid, c in self.children.items() if c is not None}
            readable = ready([listener, wake, *callers], 1.0)
            if wake in readable:
                os.read(wake, 4096)
            self.reap()
            for caller in readable:
                if caller is listener:
                    if not self._accept(listener):
                        return
                elif caller in callers:  # a caller says nothing more: it left (killed): Ctrl-C its fork
                    pid = callers[caller]
                    with contextlib.suppress(OSError):
                        if caller.recv(1, socket.MSG_PEEK):
                            continue
                    self.children[pid] = None
                    caller.close()
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGINT)
            if not self.children and time.monotonic() - self.last_activity >= self.idle:
                _say(f"no command for {self.idle:g} s: exiting")
                return

    def _accept(self, listener: socket.socket) -> bool:
        """Take one command; False when this process must go (its code is stale)."""
        caller, _ = listener.accept()
        self.last_activity = time.monotonic()
        fds: list[int] = []
        try:
            caller.settimeout(10.0)
            _, fds, _, _ = socket.recv_fds(caller, 1, 3)
            request = json.loads(caller.makefile("rb").readline())
            caller.settimeout(None)
            if len(fds) != 3:
                raise ValueError(f"{len(fds)} file descriptors")
        except (OSError, ValueError) as exc:
            _say(f"a bad request: {exc}")
            for fd in fds:
                os.close(fd)
            caller.close()
            return True
        refused = self.refusal()
        if refused:
            _say(f"refused a command: {refused}")
            if refused == "stale":  # gone before the caller hears it: the one it starts takes over
                listener.close()
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                fcntl.flock(self.lock, fcntl.LOCK_UN)
                self.handed_over = True
            with contextlib.suppress(OSError):
                caller.sendall(json.dumps({"refused": refused}).encode() + b"\n")
            caller.close()
            for fd in fds:
                os.close(fd)
            return refused != "stale"

        def child() -> int:  # the command's process: nothing of the resident one's sockets stays open in it
            for other in (listener, caller, *(c for c in self.children.values() if c is not None)):
                other.close()
            os.close(self.wake)
            code = _run_command(self.command, request, fds)
            atexit._run_exitfuncs()  # as a process that ends its main does (sessions, pools, logs)
            return code

        pid = self.fork(child)
        for fd in fds:
            os.close(fd)
        self.children[pid] = caller
        _say(f"{request['argv'] and command_of(request['argv'])}: pid {pid}")
        with contextlib.suppress(OSError):
            caller.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        return True

    def ended(self, pid: int, mark: socket.socket | None, status: int) -> None:
        """A command's fork ended: its exit code to its caller (if it is still there)."""
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code  # killed by a signal: as a shell says it
        _say(f"pid {pid} ended: exit {code}")
        self.last_activity = time.monotonic()
        if mark is not None:
            with contextlib.suppress(OSError):
                mark.sendall(json.dumps({"exit": code}).encode() + b"\n")
            mark.close()


def _run_command(command: Command, request: dict, fds: list[int]) -> int:
    """In the fork: become the caller's command (its descriptors, directory, environment) and run it."""
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.umask(int(request.get("umask", 0o022)))
        os.environ.clear()
        os.environ.update(request["env"])
        random.seed()
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "rb", closefd=False), encoding="utf-8", errors="replace")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "wb", closefd=False), encoding="utf-8",
                                      line_buffering=os.isatty(1))
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "wb", closefd=False), encoding="utf-8",
                                      errors="backslashreplace", line_buffering=True)
        sys.argv = ["transfer-platform", *request["argv"]]
    except BaseException:  # noqa: BLE001 - the caller is told by the exit code
        return 1
    code = 1
    try:
        code = command.run(request["argv"])
    except SystemExit as exc:  # argparse: usage errors (2), --help (0)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:  # noqa: BLE001 - one line, as the command line's own
        with contextlib.suppress(Exception):
            print(f"error: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    return code


def stop_servers(folder: Path) -> list[int]:
    """SIGTERM each resident process whose lock is in ``folder``; their pids."""
    stopped = []
    for lock in sorted(folder.glob("commands-*.lock")) if folder.is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            pid = int(lock.read_text().strip() or 0)
            if pid and _is_resident(pid):
                os.kill(pid, signal.SIGTERM)
                stopped.append(pid)
    return stopped


def _is_resident(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return b"transfer_platform.runtime.resident" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False


if __name__ == "__main__":  # python -m transfer_platform.runtime.resident SOCKET COMMAND_POINTER
    # the module the command's pointer imports too, not this copy of it
    from transfer_platform.runtime import resident

    sys.exit(resident.Server(Path(sys.argv[1]), resident.idle_seconds(), resident.command_at(sys.argv[2])).serve())
