"""The choice of Spark (a local one, or a Spark Connect server) and what is refused on the way;
no Spark is started here (see integration/test_spark_connect.py for a real server)."""

from __future__ import annotations

import re
import socket

import pytest

from transfer_platform.config.models import SparkSettings
from transfer_platform.config.parsing import parse_config
from transfer_platform.errors import ConfigError, ConnectionFailure
from transfer_platform.runtime.spark_session import (
    JVM_PASSWORD_MESSAGE,
    REMOTE_ENV_VAR,
    Endpoint,
    SparkServerLost,
    SparkVersionMismatch,
    check_versions,
    connect,
    connect_retry_policy,
    parse_endpoint,
    remote_endpoint,
    spark_conf,
)


@pytest.mark.parametrize(("url", "endpoint"), [
    ("sc://127.0.0.1:15002", Endpoint("127.0.0.1", 15002)),
    ("sc://spark.internal", Endpoint("spark.internal", 15002)),
    ("sc://spark.internal:443/", Endpoint("spark.internal", 443)),
])
def test_an_endpoint_is_sc_host_port(url: str, endpoint: Endpoint) -> None:
    assert parse_endpoint(url) == endpoint


@pytest.mark.parametrize("url", ["http://127.0.0.1:15002", "sc://", "sc://h:notaport", "127.0.0.1:15002",
                                 "sc://h:1/path", "sc://user:pw@h:1", "sc://h:1/;token=abc"])
def test_anything_else_is_refused_saying_how_to_write_it(url: str) -> None:
    with pytest.raises(ValueError, match="sc://host:port"):
        parse_endpoint(url)
    with pytest.raises(ConfigError, match=r"spark.remote.*sc://host:port"):
        parse_config({"spark": {"remote": url}})


def test_the_environment_variable_overrides_the_files_remote(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REMOTE_ENV_VAR, raising=False)
    settings = SparkSettings(remote="sc://file.host:15002")
    assert remote_endpoint(SparkSettings()) is None
    assert spark_conf(settings) == {"spark.remote": "sc://file.host:15002"}  # the server has the rest
    monkeypatch.setenv(REMOTE_ENV_VAR, "sc://env.host:16000")
    assert remote_endpoint(settings) == Endpoint("env.host", 16000)
    assert remote_endpoint(SparkSettings()) == Endpoint("env.host", 16000)
    monkeypatch.setenv(REMOTE_ENV_VAR, "env.host:16000")
    with pytest.raises(ConfigError, match=f"\\${REMOTE_ENV_VAR}: .*sc://host:port"):
        remote_endpoint(settings)


def test_a_local_spark_gets_the_jdbc_drivers_on_the_drivers_class_path_too() -> None:
    conf = spark_conf(SparkSettings())
    assert "spark.remote" not in conf
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.driver.extraClassPath"].split(":") == conf["spark.jars"].split(",")


def test_nothing_listening_fails_at_once_naming_the_endpoint_and_how_to_start_it() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ConnectionFailure) as failure:
        connect(Endpoint("127.0.0.1", port))
    message = str(failure.value)
    assert f"sc://127.0.0.1:{port}" in message
    assert "transfer-platform --config <file> spark-server" in message
    assert REMOTE_ENV_VAR in message


def _unavailable(port: int) -> Exception:
    """What a gRPC call to ``127.0.0.1:port`` raises when nothing answers there: a real
    ``grpc.RpcError`` with status UNAVAILABLE (what a Spark Connect client gets from a dead server)."""
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.RpcError) as failed:
        channel.unary_unary("/spark.connect.SparkConnectService/AnalyzePlan")(b"", timeout=10)
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, failed.value
    return failed.value


def test_a_server_whose_port_refuses_is_not_retried_and_one_that_listens_is() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        port = listening.getsockname()[1]
        error = _unavailable(port)  # not listened on yet: refused
        listening.listen()
        # a blip: the call failed, the server's port still takes connections
        assert connect_retry_policy(Endpoint("127.0.0.1", port)).can_retry(error)
    # the server's process is gone: nothing to wait for
    assert not connect_retry_policy(Endpoint("127.0.0.1", port)).can_retry(error)


def test_a_blip_is_retried_for_seconds_not_minutes() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        state = connect_retry_policy(Endpoint("127.0.0.1", port)).to_state()
        waits = list(iter(state.next_attempt, None))
    assert len(waits) >= 2
    assert sum(waits) < 10_000  # ms: a transfer on a dead server fails within ~15 s


def test_a_lost_server_is_named_with_how_to_start_it_again() -> None:
    message = str(SparkServerLost(Endpoint("10.0.0.7", 15002), "Connection refused"))
    assert message.startswith("cannot reach the Spark Connect server sc://10.0.0.7:15002: it stopped answering")
    assert "sc://10.0.0.7:15002 at 10.0.0.7:15002" not in message  # the server named once, by its URL
    assert "`transfer-platform --config <file> spark-server` on 10.0.0.7" in message
    assert "run the transfer again" in message


@pytest.mark.parametrize(("client", "server", "refused"), [
    ("4.3.0", "4.3.0", False), ("4.3.0", "4.3.1", False), ("4.3.0", "4.2.1", True), ("4.3.0", "3.5.1", True)])
def test_a_server_of_another_spark_version_is_refused_naming_both(client: str, server: str, refused: bool) -> None:
    endpoint = Endpoint("spark.internal", 15002)
    if not refused:
        check_versions(client, server, endpoint)
        return
    with pytest.raises(SparkVersionMismatch) as mismatch:
        check_versions(client, server, endpoint)
    assert f"Spark {server}" in str(mismatch.value)
    assert f"PySpark {client}" in str(mismatch.value)
    assert "sc://spark.internal:15002" in str(mismatch.value)


@pytest.mark.parametrize(("message", "dropped"), [
    # Spark's JDBC connection provider at DEBUG
    ("Properties: {user=reader, password=s3cret}", True),
    # a Spark Connect server at DEBUG: each plan it receives, a read's options in it
    ('options {\n  key: "password"\n  value: "s3cret"\n}', True),
    ('{"password": "s3cret"}', True),
    ("Access denied for user 'reader'@'localhost' (using password: YES)", False),
    ("password=*********(redacted)", False),
    ("options { key: \"fetchsize\" value: \"10000\" }", False),
])
def test_the_jvm_log_filter_drops_a_message_with_a_password(message: str, dropped: bool) -> None:
    assert bool(re.fullmatch(JVM_PASSWORD_MESSAGE, message)) is dropped


def test_the_jvm_log_filter_drops_a_plan_shipping_a_buckets_keys_to_the_executors() -> None:
    """What a Spark Connect server at DEBUG logs of a plan staging a window in a bucket: the
    function for the executors, pickled (its options hold the secret key), as protobuf text."""
    from functools import partial

    from google.protobuf import text_encoding
    from pyspark import cloudpickle

    from transfer_platform.destinations.staged_files import stage_partition

    shipped = cloudpickle.dumps(partial(stage_partition, folder="bucket/_tp_staging/m/w",
                                        options={"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
                                                 "AWS_SECRET_ACCESS_KEY": "s3cret-key"}))
    message = f'python_udf {{\n  command: "{text_encoding.CEscape(shipped, as_utf8=False)}"\n}}'
    assert "s3cret-key" in message
    assert re.fullmatch(JVM_PASSWORD_MESSAGE, message)
