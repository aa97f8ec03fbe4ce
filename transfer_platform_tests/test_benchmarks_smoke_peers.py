"""The end-to-end benchmark's peers run at a tiny size, so that they cannot rot: the floor, Sling
(its binary, as a subprocess) and dlt, each backfill and incremental checked afterwards, and Sling
kept on the machine. No number is asserted."""

from __future__ import annotations

import json
import shutil

import pytest

from benchmarks import cases_sling
from benchmarks.end_to_end import main

pytestmark = pytest.mark.integration

CASES = ("floor_full", "bare_copy_full", "bare_copy_binary_full", "sling_full", "dlt_full", "floor_incremental", "sling_incremental", "dlt_incremental")


def test_sling_and_dlt_run_beside_the_floor_at_a_tiny_size(tmp_path):
    out = tmp_path / "end_to_end.json"
    assert main(["--rows", "2000", "--runs", "1", "--only-peers", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    cases = results["cases"]
    assert list(cases) == list(CASES)
    for name in CASES:  # each run was checked (a wrong row count raises before the JSON is written)
        assert cases[name]["runs"] == 1, name
    assert cases["sling_full"]["rows"] == cases["dlt_full"]["rows"] == 2000
    assert cases["sling_incremental"]["rows"] == cases["floor_incremental"]["rows"] == 20  # 1% of 2,000
    assert cases["sling_full"]["ratio_to_floor"] > 0
    assert cases["bare_copy_full"]["rows"] == cases["bare_copy_binary_full"]["rows"] == 2000
    assert cases["sling_full"]["ratio_to_bare_copy"] > 0
    assert "ratio_to_bare_copy" not in cases["sling_incremental"]
    for name in CASES:  # CPU-seconds of each part, per million rows, in the JSON
        assert set(cases[name]["cpu_s_per_million_rows"]) == {"source", "destination", "client", "server"}, name
    assert cases["dlt_full"]["cpu_s"]["client"] > 0  # dlt runs in the benchmark's process
    assert results["versions"] == {"sling": cases_sling.version(), "dlt": "1.31.0"}
    assert results["machine"]["uptime_before"]
    assert results["machine"]["uptime_after"]
    network = results["sling_network"]
    assert shutil.which("strace"), "the Sling network check needs strace (apt-get install strace)"
    assert network["non_loopback"] == []
    assert network["update_check_sent_to_closed_proxy"] >= 1  # its update check reached the closed port only
    assert "AF_INET 127.0.0.1:5432" in network["destinations"]


def test_sling_environment_keeps_it_off_the_network(tmp_path):
    env = cases_sling.sling_environment(tmp_path, port=1)
    assert env["SLING_DISABLE_TELEMETRY"] == "true"
    for proxy in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        assert env[proxy] == "http://127.0.0.1:1"
    assert env["SLING_HOME_DIR"].startswith(str(tmp_path))
    assert env["HOME"] == str(tmp_path)
    inherited = set(env) - {"PATH", "HOME", "SLING_HOME_DIR", "SLING_DISABLE_TELEMETRY", "SLING_SHOW_PROGRESS",
                            "DO_NOT_TRACK", "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "NO_PROXY",
                            "no_proxy", cases_sling.SOURCE_CONN, cases_sling.TARGET_CONN}
    assert inherited == set()


def test_connects_are_read_from_an_strace_log():
    trace = ('12 connect(3, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT\n'
             '13 connect(8, {sa_family=AF_INET, sin_port=htons(5432), sin_addr=inet_addr("127.0.0.1")}, 16) = 0\n'
             '13 connect(9, {sa_family=AF_INET, sin_port=htons(443), sin_addr=inet_addr("140.82.112.6")}, 16) = 0\n'
             '14 connect(5, {sa_family=AF_INET6, sin6_port=htons(53), sin6_flowinfo=htonl(0), '
             'inet_pton(AF_INET6, "2001:4860::8888", &sin6_addr), sin6_scope_id=0}, 28) = 0\n')
    found = cases_sling.connects(trace)
    assert found == [("AF_UNIX", "/var/run/nscd/socket", 0), ("AF_INET", "127.0.0.1", 5432),
                     ("AF_INET", "140.82.112.6", 443), ("AF_INET6", "2001:4860::8888", 53)]
    assert [cases_sling.is_local(f, a) for f, a, _ in found] == [True, True, False, False]


def test_each_case_is_compared_with_the_floor_of_its_kind():
    from benchmarks.end_to_end import floor_of

    for name in ("cli_full_refresh_default", "cli_full_refresh_warm", "sling_full", "dlt_full",
                 "daemon_full_refresh_queued_to_success_s"):
        assert floor_of(name) == "floor_full", name
    for name in ("cli_incremental_default", "sling_incremental", "dlt_incremental",
                 "daemon_incremental_queued_to_success_s", "daemon_default_launcher_queued_to_success_s"):
        assert floor_of(name) == "floor_incremental", name
    for name in ("floor_full", "floor_incremental", "daemon_incremental_run_s", "demo_backfill_warm",
                 "daemon_sustained"):
        assert floor_of(name) is None, name
