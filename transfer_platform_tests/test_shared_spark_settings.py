"""The shared Spark server's key, its switch ($TRANSFER_PLATFORM_SHARED_SPARK, spark.shared) and its
settings; the server itself is in integration/test_shared_spark.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from transfer_platform.config.models import SparkSettings
from transfer_platform.errors import ConfigError
from transfer_platform.runtime.shared_spark import (
    SHARED_ENV_VAR,
    SHARED_MARKER,
    STATE_DIR_ENV_VAR,
    live_state,
    server_key,
    shared_from_env,
    state_dir,
)
from transfer_platform.runtime.spark_session import REMOTE_ENV_VAR, local_spark_conf, spark_conf


def test_the_key_changes_with_each_of_its_fields_and_only_with_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark

    conf = local_spark_conf(SparkSettings())
    key, fields = server_key(conf)
    assert server_key(dict(reversed(list(conf.items()))))[0] == key  # the order of the settings is no part
    assert set(fields) == {"pyspark", "transfer_platform", "python", "conf"}
    assert fields["python"] == sys.executable
    assert fields["conf"]["spark.master"] == "local[2]"
    others = {
        server_key(local_spark_conf(SparkSettings(driver_memory="3g")))[0],
        server_key(local_spark_conf(SparkSettings(master="local[1]")))[0],
        server_key(local_spark_conf(SparkSettings(conf={"spark.sql.shuffle.partitions": "7"})))[0],
    }
    monkeypatch.setenv("TRANSFER_PLATFORM_JDBC_JARS", "/nonexistent.jar")  # no driver jar found: other jars
    others.add(server_key(local_spark_conf(SparkSettings()))[0])
    monkeypatch.delenv("TRANSFER_PLATFORM_JDBC_JARS")
    monkeypatch.setattr(sys, "executable", "/other/python")
    others.add(server_key(conf)[0])
    monkeypatch.undo()
    monkeypatch.setattr(pyspark, "__version__", "4.9.0")
    others.add(server_key(conf)[0])
    monkeypatch.setattr("transfer_platform.runtime.shared_spark._package_version", lambda: "9.9.9")
    others.add(server_key(conf)[0])
    assert key not in others
    assert len(others) == 7


@pytest.mark.parametrize(("value", "expected"), [
    ("", None), ("0", False), ("false", False), ("OFF", False), ("no", False), (" 0 ", False),
    ("1", True), ("true", True), ("On", True), ("yes", True),
])
def test_the_variable_turns_the_shared_server_on_or_off(monkeypatch: pytest.MonkeyPatch, value: str,
                                                        expected: bool | None) -> None:
    monkeypatch.setenv(SHARED_ENV_VAR, value)
    assert shared_from_env() is expected


def test_the_variable_unset_says_nothing_and_any_other_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SHARED_ENV_VAR, raising=False)
    assert shared_from_env() is None
    for value in ("maybe", "2", "enabled"):
        monkeypatch.setenv(SHARED_ENV_VAR, value)
        with pytest.raises(ConfigError, match=rf"\${SHARED_ENV_VAR}='{value}' is neither on nor off; fix: set it to 0"):
            shared_from_env()


def test_the_state_folder_is_the_variables_else_the_users_cache(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.setenv(STATE_DIR_ENV_VAR, str(tmp_path / "x"))
    assert state_dir() == tmp_path / "x"
    monkeypatch.delenv(STATE_DIR_ENV_VAR)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert state_dir() == tmp_path / ".cache" / "transfer_platform" / "spark"


def test_the_settings_ask_for_the_shared_server_unless_turned_off_or_remote(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REMOTE_ENV_VAR, raising=False)
    assert spark_conf(SparkSettings())[SHARED_MARKER] == "1800"
    assert spark_conf(SparkSettings(shared_idle_seconds=60))[SHARED_MARKER] == "60"
    assert SHARED_MARKER not in spark_conf(SparkSettings(shared=False))
    assert spark_conf(SparkSettings(remote="sc://127.0.0.1:15002")) == {"spark.remote": "sc://127.0.0.1:15002"}


@pytest.mark.parametrize("spark", [
    {"shared_idle_seconds": 9}, {"shared_idle_seconds": 8 * 86400}, {"shared_idle_seconds": "1800"},
    {"shared_idle_seconds": 60.5}, {"shared": "yes"}, {"shared": 1}, {"shared_idle": 60},
])
def test_a_shared_setting_of_the_wrong_kind_is_refused(spark: dict) -> None:
    with pytest.raises(pydantic.ValidationError):
        SparkSettings(**spark)


def test_a_state_file_whose_process_is_gone_or_is_no_server_is_stale_and_removed(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    for pid in (int(gone.stdout), os.getpid()):  # a pid that ended; this process (not a server)
        (tmp_path / "k.json").write_text(json.dumps({"pid": pid, "port": 1, "key": "k"}))
        assert live_state(tmp_path, "k") is None
        assert not (tmp_path / "k.json").exists()


def test_a_session_names_its_client_process_in_its_user_id() -> None:
    from transfer_platform.runtime.shared_spark import CLIENT_USER_PREFIX, client_pid

    assert client_pid(f"{CLIENT_USER_PREFIX}4242") == 4242
    for other in ("", "alice", f"{CLIENT_USER_PREFIX}", f"{CLIENT_USER_PREFIX}12x", "4242"):
        assert client_pid(other) is None
