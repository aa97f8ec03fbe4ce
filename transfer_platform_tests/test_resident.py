"""The resident command process (``transfer_platform.runtime.resident``): ``transfer-platform`` commands
forked from a Python that has imported the data path already, as a user runs them: the installed
``transfer-platform`` executable, in processes of their own, with the shared mode on (the suite
turns it off for every other test)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from transfer_platform.runtime import resident
from transfer_platform_tests.support.config import valid_raw

CLI = str(Path(sys.executable).with_name("transfer-platform"))
BOUND_S = 120.0  # bounds a failure only: a resident process listens about a second after it starts


def wait_for(condition: Callable[[], object], what: str, bound_s: float = BOUND_S):
    deadline = time.monotonic() + bound_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound_s:g} s: {what}")
        time.sleep(0.05)
    return value


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


class Place:
    """A state folder of its own and the environment of a user's shell (the shared mode on)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "state"
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("TRANSFER_PLATFORM_SHARED_SPARK", "TRANSFER_PLATFORM_CONFIG", "PG_PASSWORD")}
        self.env["TRANSFER_PLATFORM_STATE_DIR"] = str(self.state)

    def run(self, *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run([CLI, *argv], capture_output=True, text=True, env={**self.env, **(env or {})},
                              cwd=cwd or self.root, timeout=BOUND_S, check=False, **kwargs)

    def log(self) -> str:
        logs = list(self.state.glob("commands-*.log"))
        return "".join(p.read_text() for p in logs)

    def listening(self) -> bool:
        return "listening on" in self.log() and bool(list(self.state.glob("commands-*.sock")))

    def forks(self) -> list[int]:
        return [int(line.rsplit("pid ", 1)[1]) for line in self.log().splitlines()
                if line.rstrip().rsplit(": ", 1)[-1].startswith("pid ")]

    def server_pids(self) -> list[int]:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                text = cmdline.read_bytes()
            except OSError:
                continue
            if b"transfer_platform.runtime.resident" in text and str(self.state).encode() in text:
                pid = int(cmdline.parent.name)
                if alive(pid):
                    found.append(pid)
        return found

    def started(self) -> None:
        """A first command (run in its own process) has started the resident process; it listens."""
        self.run("--config", str(self.root / "none.yaml"), "validate")
        wait_for(self.listening, f"a resident process listening in {self.state}")

    def stop(self) -> None:
        for pid in resident.stop_servers(self.state):
            wait_for(lambda p=pid: not alive(p), f"resident process {pid} stopped")


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Place]:
    place = Place(tmp_path)
    try:
        yield place
    finally:
        place.stop()
        for pid in place.server_pids():
            os.kill(pid, signal.SIGKILL)


def write(path: Path, raw: dict) -> Path:
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_command_run_by_the_resident_process_says_and_exits_as_it_does_in_its_own(place: Place):
    good = write(place.root / "good.yaml", valid_raw())
    bad_raw = valid_raw()
    bad_raw["models"][0]["columns"][0]["data_type"] = "integr"
    bad = write(place.root / "bad.yaml", bad_raw)
    cases = [("--config", str(good), "validate"), ("--config", str(bad), "validate"),
             ("--config", str(good), "validate", "--no-such-option"), ("validate", "--help")]
    own = [place.run(*argv, env={"TRANSFER_PLATFORM_SHARED_SPARK": "0"}) for argv in cases]
    assert not place.state.exists()  # off: nothing started
    place.started()
    served = [place.run(*argv) for argv in cases]
    for argv, alone, forked in zip(cases, own, served, strict=True):
        assert (forked.returncode, forked.stdout, forked.stderr) == (alone.returncode, alone.stdout, alone.stderr), argv
    assert [c.returncode for c in served] == [0, 2, 2, 0]
    assert "valid (2 source(s)" in served[0].stdout
    assert "integr" in served[1].stderr
    assert len(place.forks()) == len(cases)  # each forked by the resident process, none run alone


def test_the_command_gets_its_callers_directory_and_environment(place: Place):
    write(place.root / "transfer_platform.yaml", valid_raw())
    elsewhere = place.root / "elsewhere"
    elsewhere.mkdir()
    write(elsewhere / "other.yaml", valid_raw())
    place.started()
    here = place.run("validate")
    assert here.returncode == 0
    assert str(place.root / "transfer_platform.yaml") in here.stdout
    assert "PG_PASSWORD" in here.stderr  # the secret's variable is not set in this caller
    with_secret = place.run("validate", env={"PG_PASSWORD": "s3cret"})
    assert with_secret.returncode == 0
    assert "PG_PASSWORD" not in with_secret.stderr
    by_variable = place.run("validate", env={"TRANSFER_PLATFORM_CONFIG": "other.yaml"}, cwd=elsewhere)
    assert by_variable.returncode == 0
    assert "other.yaml: valid" in by_variable.stdout
    assert len(place.forks()) == 3
    assert "s3cret" not in place.log()


@pytest.fixture
def silent_port() -> Iterator[tuple[int, threading.Event]]:
    """A port that accepts connections and never answers (a database that hangs)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return
            accepted.set()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        listener.close()
        for conn in held:
            conn.close()


def hanging_test_connection(place: Place, port: int, stderr=subprocess.PIPE, umask: int = -1) -> subprocess.Popen:
    raw = valid_raw()
    raw["sources"][0]["connection"].update(host="127.0.0.1", port=port)
    config = write(place.root / "hangs.yaml", raw)
    return subprocess.Popen([CLI, "--config", str(config), "test-connection", "app_db"], stdout=subprocess.PIPE,
                            stderr=stderr, text=True, env={**place.env, "PG_PASSWORD": "x"}, umask=umask)


def umask_of(pid: int) -> str:
    return next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("Umask:"))


def test_ctrl_c_reaches_the_command(place: Place, silent_port):
    port, accepted = silent_port
    place.started()
    caller = hanging_test_connection(place, port, umask=0o077)
    wait_for(lambda: len(place.forks()) == 1 and accepted.is_set(), "the command waiting on the silent database")
    fork = place.forks()[0]
    assert umask_of(fork) == "0077"  # the caller's, not the resident process's (files it makes)
    assert umask_of(place.server_pids()[0]) != "0077"
    caller.send_signal(signal.SIGINT)
    out, err = caller.communicate(timeout=BOUND_S)
    assert caller.returncode == 130, err
    assert "interrupted" in err
    wait_for(lambda: not alive(fork), "the command's process gone")


def test_a_caller_killed_takes_its_command_with_it(place: Place, silent_port):
    port, accepted = silent_port
    place.started()
    errors = place.root / "stderr.txt"  # the command's stderr: a file, which outlives the caller
    with errors.open("w") as stderr:
        caller = hanging_test_connection(place, port, stderr=stderr)
    wait_for(lambda: len(place.forks()) == 1 and accepted.is_set(), "the command waiting on the silent database")
    fork = place.forks()[0]
    caller.kill()
    caller.communicate()
    wait_for(lambda: not alive(fork), "the command's process gone after its caller")
    assert "error: interrupted" in errors.read_text()  # stopped as by Ctrl-C, not by the database's timeout
    assert place.server_pids()  # the resident process itself stays


def test_commands_starting_at_once_start_one_resident_process(place: Place):
    config = write(place.root / "good.yaml", valid_raw())
    callers = [subprocess.Popen([CLI, "--config", str(config), "validate"], env=place.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE) for _ in range(4)]
    assert [c.wait(BOUND_S) for c in callers] == [0, 0, 0, 0]
    wait_for(place.listening, "a resident process listening")
    wait_for(lambda: len(place.server_pids()) == 1, "the resident processes but one gone")
    assert place.log().count("listening on") == 1


def test_changed_code_is_never_run_from_a_stale_resident_process(tmp_path: Path):
    """A resident process whose package's files changed refuses (the command runs in its
    caller's process), exits, and the next command starts a fresh one. The package here is one
    of the test's own, put first on ``PYTHONPATH`` (the resident process watches it instead of
    ``transfer_platform``'s files, which the test must not touch)."""
    package = tmp_path / "fake_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    place = Place(tmp_path)
    place.env["PYTHONPATH"] = str(tmp_path)
    config = write(tmp_path / "good.yaml", valid_raw())
    place.state.mkdir()
    # the socket's name depends on PYTHONPATH: asked of a Python with the callers' environment
    probe = subprocess.run([sys.executable, "-c", "from transfer_platform.runtime import resident; print(resident.socket_path())"],
                           env=place.env, capture_output=True, text=True, check=True)
    path = Path(probe.stdout.strip())
    with path.with_suffix(".log").open("ab") as log:
        server = subprocess.Popen(
            [sys.executable, "-c", "import sys; from pathlib import Path; from transfer_platform.runtime.resident import "
             "Server; from transfer_platform.executable import COMMAND; "
             "sys.exit(Server(Path(sys.argv[1]), 600, COMMAND, module='fake_pkg').serve())", str(path)],
            env=place.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: path.exists(), "the resident process listening")
        assert place.run("--config", str(config), "validate").returncode == 0
        assert len(place.forks()) == 1
        (package / "__init__.py").write_text("CHANGED = True\n")
        stale = place.run("--config", str(config), "validate")
        assert stale.returncode == 0
        assert "valid (" in stale.stdout  # run by its caller, as it should
        assert len(place.forks()) == 1
        server.wait(BOUND_S)  # the stale one went
        assert "refused a command: stale" in place.log()
        wait_for(lambda: place.log().count("listening on") == 2, "a fresh resident process")
    finally:
        server.kill()
        server.wait()
        place.stop()


def test_the_resident_process_goes_when_idle(place: Place):
    place.env[resident.IDLE_ENV_VAR] = "1"
    place.started()
    pids = wait_for(place.server_pids, "the resident process running")
    wait_for(lambda: not any(alive(p) for p in pids), "the idle resident process gone", bound_s=60)
    assert "no command for 1 s: exiting" in place.log()
    assert not list(place.state.glob("commands-*.sock"))


@pytest.mark.parametrize("off", [{"env": {"TRANSFER_PLATFORM_SHARED_SPARK": "0"}, "argv": ()},
                                 {"env": {}, "argv": ("--no-shared-spark",)}], ids=["variable", "option"])
def test_off_with_the_shared_spark_server(place: Place, off: dict):
    config = write(place.root / "good.yaml", valid_raw())
    for _ in range(2):
        done = place.run("--config", str(config), "transfer", "acme_lake", "--dry-run", *off["argv"], env=off["env"])
        assert done.returncode in (0, 1, 2), done.stderr
    assert not place.state.exists()
    assert not place.server_pids()
