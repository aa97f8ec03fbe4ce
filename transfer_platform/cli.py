"""``transfer-platform``: validate the configuration; test a source or destination; run or enqueue
a transfer; check a destination's integrity; list and cancel transfers; run the demo.

Output: stdout holds only the result (a JSON summary, a transfer id, a table), stderr the
progress, warnings and errors. Errors are one line each: exit 2 for a configuration or usage
error, 1 for a failure at run time; a traceback only with --verbose."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import textwrap
import uuid
from datetime import UTC, datetime
from pathlib import Path

from transfer_platform.config.loading import load_config
from transfer_platform.config.parsing import find_config_path
from transfer_platform.core.lifecycle import STATUSES
from transfer_platform.errors import ConfigError, Problem, TransferPlatformError

LOG_LEVEL_ENV = "TRANSFER_PLATFORM_LOG_LEVEL"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


_FRAME = re.compile(r"^(at |\.\.\. \d+ more|Caused by: |Traceback |File \")")


def one_line(text: str) -> str:
    """A message on one line: its lines joined, stack frames (Java's or Python's) left out."""
    kept = [line.strip() for line in str(text).strip().splitlines()]
    return " ".join(line for line in kept if line and not _FRAME.match(line))


_FIX = re.compile(r"\.?\s+Fix: ")


def error_text(text: str) -> str:
    """An error's message as the command line's ``error:`` line says it: on one line, the fix
    after ``; fix:`` (the platform's errors end with ". Fix: ...")."""
    line = one_line(text)
    found = list(_FIX.finditer(line))
    if not found:
        return line
    last = found[-1]
    return f"{line[:last.start()]}; fix: {line[last.end():]}"


def problem_line(problem: Problem, source: str | None = None) -> str:
    """A configuration problem on one line: where, what, and the fix."""
    where = f"{source}: " if source and source != problem.path else ""
    return f"{where}{problem.path}: {problem.message}" + (f"; fix: {problem.fix}" if problem.fix else "")


def error_lines(exc: TransferPlatformError) -> list[str]:
    """What the command line prints for an error: one line per configuration problem, else one."""
    if isinstance(exc, ConfigError):
        return [f"error: {problem_line(p, exc.source)}" for p in exc.problems]
    return [f"error: {error_text(str(exc))}"]


def _failed(message: str, code: int = 1) -> int:
    """``error: <message>`` on stderr; the exit code ``code``."""
    print(f"error: {message}", file=sys.stderr)
    return code


def cmd_validate(args: argparse.Namespace) -> int:
    """Check the file; every problem with its path and fix (exit 2). A secret whose variable is
    not set here is a warning only: validate may run where secrets are not set (CI); a transfer
    refuses to start without it."""
    from transfer_platform.transfers.preflight import unset_secrets_of

    path = find_config_path(args.config)
    config = load_config(path)
    for problem in unset_secrets_of(config):
        print(f"warning: {problem.path}: {problem.message}, so a transfer here would refuse to start; "
              f"fix: {problem.fix}", file=sys.stderr)
    print(f"{path}: valid ({len(config.sources)} source(s), {len(config.models)} model(s), "
          f"{len(config.recipients)} recipient(s), {len(config.destinations)} destination(s))")
    return 0


def _spark(config, args: argparse.Namespace):  # PlatformConfig -> SparkSession
    """The session, started with the JVM's output (banner, log, Java stack traces) kept off the
    terminal unless --verbose: a client of ``spark.remote``, of the shared Spark server (the
    default; started in the background on first use), or (--no-shared-spark) a Spark of its own."""
    from transfer_platform.console.streams import child_output
    from transfer_platform.runtime.spark_session import get_spark_session, remote_endpoint

    endpoint = remote_endpoint(config.spark)
    shared = _shared(config, args)
    where = (f"Spark Connect server {endpoint.url}" if endpoint else
             f"shared Spark server, {config.spark.master}" if shared else config.spark.master)
    print(f"starting Spark ({where})", file=sys.stderr, flush=True)
    warnings: list[str] = []
    try:
        with child_output(args.verbose) as output:
            try:
                return get_spark_session(config.spark, shared=shared, warn=warnings.append)
            except TransferPlatformError:
                raise
            except Exception as exc:
                tail = output.tail(3)
                raise SparkDidNotStart(f"Spark did not start: {_one_line(exc)}"
                                       + (f" (its last output: {' | '.join(tail)})" if tail else "")
                                       + ". Fix: check Java 17 and the spark settings of the configuration; "
                                       "run again with --verbose to see the JVM's output") from exc
    finally:
        for warning in warnings:  # said after the JVM's output is put back on the terminal
            print(f"warning: {warning}", file=sys.stderr, flush=True)


def _shared(config, args: argparse.Namespace) -> bool:
    """Whether this command uses the shared Spark server (without spark.remote): not with
    --no-shared-spark, ``$TRANSFER_PLATFORM_SHARED_SPARK`` off or ``spark.shared: false``."""
    from transfer_platform.runtime.shared_spark import shared_from_env

    from_env = shared_from_env()  # a ConfigError for a value that is neither on nor off
    return not getattr(args, "no_shared_spark", False) and from_env is not False and config.spark.shared


class SparkDidNotStart(TransferPlatformError):
    """The local Spark (its JVM) could not be started."""


class _NoSpark(Exception):
    """Spark did not start for a transfer that needed it (:class:`_LazySpark`): not a model's
    failure but the command's, raised through the transfer (the models' outcomes recorded)."""

    def __init__(self, error: TransferPlatformError) -> None:
        super().__init__(str(error))
        self.error = error


class _LazySpark:
    """``transfer``'s session in the default mode (the shared Spark server), started by
    :func:`_spark` on first use (``LazySession``): a transfer whose reads need no Spark (small
    windows read by the database's driver) never opens one. A failure to start ends the command
    (:class:`_NoSpark`)."""

    def __init__(self, config, args: argparse.Namespace) -> None:
        from transfer_platform.runtime.spark_session import LazySession

        self.session = LazySession(lambda: self._start(config, args))

    @staticmethod
    def _start(config, args: argparse.Namespace):  # -> SparkSession
        try:
            return _spark(config, args)
        except TransferPlatformError as exc:
            raise _NoSpark(exc) from exc


def _lazy_spark(config, args: argparse.Namespace, order) -> bool:  # a PlatformConfig, a TransferOrder
    """Whether ``transfer``'s session starts on first use: in the default mode (the shared
    server), not for a dry run, nor for a server the configuration names (``spark.remote``:
    checked at the start, a server that is down fails the command before anything is touched)
    nor for ``--no-shared-spark`` (a Spark of the process's own, asked for)."""
    from transfer_platform.runtime.spark_session import remote_endpoint

    return not order.dry_run and remote_endpoint(config.spark) is None and _shared(config, args)


def cmd_transfer(args: argparse.Namespace) -> int:
    if args.enqueue and args.dry_run:
        return _failed("--dry-run plans here, in this process, and cannot be enqueued: drop --enqueue "
                       "(in Dagster, launch the transfer job with dry_run: true in its op config)", 2)
    if args.enqueue:
        return _enqueue(args)
    if args.tag:
        return _failed("--tag labels a transfer in the Dagster instance's transfer list, and a transfer "
                       "run here, in this process, is not listed there: add --enqueue to run it through "
                       "the queue with its tags, or drop --tag", 2)
    from transfer_platform.console.progress import progress_for
    from transfer_platform.transfers.entry import Transfer, models_of
    from transfer_platform.transfers.preflight import check_before_spark

    path = find_config_path(args.config)
    config = load_config(path)
    order = _order(args, destination=config.destination(args.destination).name)
    models = models_of(config, order.destination, order.models)
    check_before_spark(config, order.destination, models, now=datetime.now(UTC), start=order.start,
                       end=order.end, source=str(path))
    report = None if order.dry_run else _runless_reporter(config, order.destination)
    # in the default mode, a transfer whose reads need no Spark (small windows read by the
    # database's driver) never opens a Spark session
    spark = _LazySpark(config, args).session if _lazy_spark(config, args, order) else _spark(config, args)
    progress = (progress_for(sys.stderr, what="windows counted", label=lambda model: f"{model} (dry run)")
                if order.dry_run else progress_for(sys.stderr))
    transfer = Transfer(spark=spark, config=config, order=order, transfer_id=uuid.uuid4().hex,
                        now=datetime.now(UTC), log=logging.getLogger("transfer_platform.transfer"),
                        on_plan=progress.planned,
                        on_window=lambda model, outcome: progress.advanced(model.model_name,
                                                                           outcome.result.rows_transferred))
    if order.dry_run:
        return _dry_run(transfer, progress)
    try:
        for model, partition in transfer.run():
            if report is not None:
                report(model, partition)
    except BaseException as exc:  # an interrupt, a bug: the models' outcomes recorded, then raised on
        if report is not None:
            try:
                report.stopped(transfer, exc)
            except Exception as failed:  # noqa: BLE001 - the transfer's own error is the one to show
                logging.getLogger("transfer_platform").warning(
                    "the models' outcomes could not be recorded in the Dagster instance: %s", _one_line(failed))
        if isinstance(exc, _NoSpark):
            raise exc.error from None
        raise
    finally:
        progress.close()
    if report is not None:
        report.ended(transfer)
    print(json.dumps(transfer.as_dict(), indent=2))
    return _exit_code([(s.model, s.error) for s in transfer.failed])


def _order(args: argparse.Namespace, *, destination: str):  # -> TransferOrder
    """What ``transfer`` was asked on the command line."""
    from transfer_platform.transfers.order import TransferOrder

    return TransferOrder(destination=destination, models=args.model, full_refresh=args.full_refresh,
                         start=args.start, end=args.end, dry_run=args.dry_run, tags=args.tag, trigger="cli")


def _dry_run(transfer, progress) -> int:  # a Transfer, its Progress
    """Print the plan of the transfer (windows, read bounds, row counts); change nothing."""
    from transfer_platform.transfers.dry_run import plan_as_dict

    try:
        plans = transfer.plan(on_count=progress.advanced)
    finally:
        progress.close()
    print(json.dumps(plan_as_dict(transfer.destination, transfer.now, plans), indent=2))
    return _exit_code([(p.model, p.error) for p in plans if p.error is not None])


def _exit_code(failed: list[tuple[str, str | None]]) -> int:
    """1 (the first failed model's error on stderr) if any model failed, else 0."""
    if failed:
        return _failed(f"{failed[0][0]}: {error_text(failed[0][1])}")
    return 0


def _runless_reporter(config, destination: str):  # PlatformConfig -> RunlessReporter | None
    """With ``DAGSTER_HOME`` set, what reports to that Dagster instance each partition moved and
    each model's outcome (its ``last_transfer`` check; a failure also as an observation)."""
    if not os.environ.get("DAGSTER_HOME"):
        return None
    from dagster import DagsterInstance

    from transfer_platform.orchestration.catalog.reporting import RunlessReporter

    return RunlessReporter(DagsterInstance.get(), config, destination)


def _instance():  # -> DagsterInstance
    from dagster import DagsterInstance

    if not os.environ.get("DAGSTER_HOME"):
        raise ConfigError("DAGSTER_HOME is not set: the queue and the transfer list live in a Dagster "
                          "instance (export DAGSTER_HOME=... with the dagster.yaml of this repository)")
    return DagsterInstance.get()


def _enqueue(args: argparse.Namespace) -> int:
    """Submit the transfer and print its id alone on stdout: the code server Dagster starts to
    launch it writes its log elsewhere (nowhere; on stderr with --verbose). Secrets are not
    checked here: the run reads them where it runs."""
    from transfer_platform.console.streams import child_output
    from transfer_platform.orchestration.runs.transfers import enqueue
    from transfer_platform.transfers.preflight import window_problems

    path = find_config_path(args.config)
    config = load_config(path)
    order = _order(args, destination=args.destination)
    problems = window_problems(order.start, order.end, datetime.now(UTC))
    if problems:
        raise ConfigError(problems)
    with _instance() as instance, child_output(args.verbose):
        transfer_id = enqueue(instance, config, path, order)
    print(transfer_id, flush=True)
    return 0


def cmd_test_connection(args: argparse.Namespace) -> int:
    from transfer_platform.transfers.connection_test import lines, run_connection_test

    checks = run_connection_test(load_config(args.config), args.name)
    for line in lines(checks):
        print(line)
    return 1 if any(check.failed for check in checks) else 0


def cmd_sweep_deletes(args: argparse.Namespace) -> int:
    from transfer_platform.transfers.delete_sweep import sweep_deletes
    from transfer_platform.transfers.preflight import check_before_spark

    path = find_config_path(args.config)
    config = load_config(path)
    destination = config.destination(args.destination)
    swept = [m for m in config.models_for(destination) if m.delete_detection == "sweep"]
    models = [m for m in swept if not args.model or m.model_name in args.model]
    unknown = sorted(set(args.model or []) - {m.model_name for m in swept})
    if unknown or not models:
        raise ConfigError(f"destination {destination.name!r} sweeps no model(s) {unknown or '(none given)'}; "
                          f"models with delete_detection: sweep there: {[m.model_name for m in swept]}")
    check_before_spark(config, destination.name, models, now=datetime.now(UTC), source=str(path))
    spark, sweep_id, failed = _spark(config, args), uuid.uuid4().hex, []
    reports = []
    for model in models:
        try:
            reports.append(sweep_deletes(spark, config, destination.name, model, datetime.now(UTC), sweep_id).as_dict())
        except TransferPlatformError as exc:
            reports.append({"destination": destination.name, "model": model.model_name, "error": str(exc)})
            failed.append(f"{model.model_name}: {exc}")
    print(json.dumps({"sweep_id": sweep_id, "models": reports}, indent=2))
    if failed:
        return _failed(one_line(failed[0]))
    return 0


def cmd_integrity(args: argparse.Namespace) -> int:
    """Compare (primary key, last-modified) of each model's source rows of the recipient with the
    destination (the check Dagster runs as the asset check ``integrity``); the counts as JSON on
    stdout, what each failure means and its fix on stderr; exit 1 unless every model is clean."""
    from transfer_platform.core.timeutil import isoformat
    from transfer_platform.transfers.entry import models_of
    from transfer_platform.transfers.integrity import check_integrity, describe
    from transfer_platform.transfers.preflight import check_before_spark

    path = find_config_path(args.config)
    config = load_config(path)
    destination = config.destination(args.destination)
    models = models_of(config, destination.name, args.model)
    check_before_spark(config, destination.name, models, now=datetime.now(UTC), source=str(path))
    spark = _spark(config, args)
    now = datetime.now(UTC)  # the checks' clock, captured once and passed down
    results = []
    for model in models:
        print(f"{model.model_name}: comparing the source's rows with the destination's", file=sys.stderr, flush=True)
        try:
            report = check_integrity(spark, config, destination.name, model, now)
        except TransferPlatformError as exc:
            results.append({"model": model.model_name, "status": "ERROR", "error": str(exc)})
            print(error_lines(exc)[0], file=sys.stderr)
            continue
        results.append({"model": model.model_name, "status": "PASSED" if report.passed else "FAILED",
                        **report.counts, "failures": report.failures, "horizon": isoformat(report.horizon),
                        "watermark": isoformat(report.watermark), "examples": report.examples})
        print(describe(report, model.source_name), file=sys.stderr)
    clean = all(r["status"] == "PASSED" for r in results)
    print(json.dumps({"destination": destination.name, "checked_at": isoformat(now),
                      "status": "PASSED" if clean else "FAILED", "models": results}, indent=2))
    return 0 if clean else 1


def _when(moment: str | None) -> str:
    """A time of the transfer list: ISO-8601 to the second, with its zone (UTC)."""
    if moment is None:
        return "-"
    return datetime.fromisoformat(moment).astimezone(UTC).isoformat(timespec="seconds")


def _duration(transfer: dict, now: datetime) -> str:
    """From start to end (to now while it runs); ``-`` before it starts."""
    from transfer_platform.console.progress import clock

    if transfer["started_at"] is None:
        return "-"
    end = datetime.fromisoformat(transfer["ended_at"]) if transfer["ended_at"] else now
    return clock((end - datetime.fromisoformat(transfer["started_at"])).total_seconds())


def cmd_transfers(args: argparse.Namespace) -> int:
    from transfer_platform.orchestration.runs.lifecycle import sweep
    from transfer_platform.orchestration.runs.transfers import TransferFilter, list_transfers

    with _instance() as instance:
        sweep(instance, datetime.now(UTC))
        found = list_transfers(instance, TransferFilter(
            destination=args.destination, status=args.status, tags=args.tag,
            ended_before=args.ended_before, ended_after=args.ended_after, limit=args.limit))
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    now = datetime.now(UTC)
    print(f"{'id':36}  {'destination':14} {'status':15} {'submitted_at':25} {'started_at':25} "
          f"{'ended_at':25} {'duration':>8} {'rows':>8} {'delta':>8} {'mb':>8}  tags")
    for t in found:
        print(f"{t['id']:36}  {t['destination'] or '-':14} {t['status']:15} {_when(t['submitted_at']):25} "
              f"{_when(t['started_at']):25} {_when(t['ended_at']):25} {_duration(t, now):>8} "
              f"{t['rows_transferred']:>8} {t['delta_rows_transferred']:>8} "
              f"{t['volume_transferred_in_mb']:>8}  {','.join(f'{k}={v}' for k, v in t['tags'].items())}")
        for model, metrics in t["models"].items():
            superseded = metrics.get("versions_superseded") or 0
            print(f"    {model}: {metrics['windows']} window(s), {metrics['rows_transferred']} rows, "
                  f"{metrics['delta_rows_transferred']} delta, latest {metrics['most_recent_last_updated_at']}"
                  + (f", {superseded} older version(s) or copies left out" if superseded else ""))
        for error in t["errors"]:
            print(f"    error in {error['step']}: {error['error']}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from transfer_platform.orchestration.runs.transfers import cancel

    with _instance() as instance:
        try:
            status = cancel(instance, args.transfer_id)
        except LookupError as exc:
            return _failed(str(exc))
    print(f"{args.transfer_id}: {status}")
    return 0


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO-8601 time (e.g. 2025-01-31T00:00:00Z)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _tag(text: str) -> tuple[str, str]:
    from transfer_platform.orchestration.scheduling.run_tags import parse_user_tags

    try:
        ((key, value),) = parse_user_tags([text]).items()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return key, value


def _tag_filter(text: str) -> tuple[str, str]:
    key, dot, value = text.partition(".")
    if not dot:
        raise argparse.ArgumentTypeError(f"{text!r}: filter tags as key.value")
    return _tag(f"{key}={value}")


class _Tags(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        tags = dict(getattr(namespace, self.dest) or {})
        tags[values[0]] = values[1]
        setattr(namespace, self.dest, tags)


def cmd_signing_key(args: argparse.Namespace) -> int:
    """A new Ed25519 key pair for an object-storage destination's manifests (base64, 32 bytes each):
    the private key goes into the variable its ``signing_key`` names, the public key to consumers."""
    from transfer_platform.destinations.manifests import new_signing_key

    private, public = new_signing_key()
    print(json.dumps({"private_key": private, "public_key": public}))
    return 0


def cmd_spark_server(args: argparse.Namespace) -> int:
    """Run the Spark Connect server that transfers share, in the foreground, until stopped."""
    from transfer_platform.config.endpoints import DEFAULT_CONNECT_PORT, Endpoint
    from transfer_platform.runtime.spark_session import remote_endpoint, serve

    if args.stop:
        from transfer_platform.runtime.resident import stop_servers as stop_resident
        from transfer_platform.runtime.shared_spark import state_dir, stop_servers

        folder = state_dir()
        stopped = stop_servers(folder)
        for state in stopped:
            print(f"stopped the shared Spark server {state['url']} (pid {state['pid']}, log {state['log']})")
        if not stopped:
            print(f"no shared Spark server runs (state folder {folder})")
        for pid in stop_resident(folder):
            print(f"stopped the resident command process (pid {pid})")
        return 0
    path = find_config_path(args.config)
    named = args.config or os.environ.get("TRANSFER_PLATFORM_CONFIG")
    settings = load_config(path).spark if named or path.is_file() else None  # else the defaults
    endpoint = remote_endpoint(settings) or Endpoint("127.0.0.1", DEFAULT_CONNECT_PORT)
    endpoint = Endpoint(args.host or endpoint.host, args.port or endpoint.port)
    serve(settings, endpoint, ready=lambda message: print(message, flush=True))
    return 0


def cmd_api(args: argparse.Namespace) -> int:
    from transfer_platform.api.app import create_app, serve
    from transfer_platform.store.database import migrate

    app = create_app(args.config)
    migrate(app.state.store.settings.connection)
    serve(app, host=args.host, port=args.port, log_level="warning" if not args.verbose else "info")
    return 0


def cmd_api_key(args: argparse.Namespace) -> int:
    from transfer_platform.store.api_keys import create_key, revoke_key
    from transfer_platform.store.resources import ResourceStore

    engine = ResourceStore(args.config).engine
    if args.action == "create":
        _, key = create_key(engine, args.name, args.scope or "admin")
        print(key)
        return 0
    if args.scope is not None:
        return _failed("--scope is for api-key create; fix: revoke by name or id alone", 2)
    if not revoke_key(engine, args.name):
        return _failed(f"no active API key named (or with id) {args.name!r}")
    print(f"revoked {args.name}")
    return 0


def cmd_store(args: argparse.Namespace) -> int:
    from transfer_platform.config.secrets import new_secret_key

    if args.action == "new-key":
        print(new_secret_key())
        return 0
    from transfer_platform.store.database import migrate
    from transfer_platform.store.resources import ResourceStore

    resources = ResourceStore(args.config)
    if args.action == "migrate":
        print(f"store at revision {migrate(resources.settings.connection)}")
        return 0
    counts = resources.import_file()
    print(json.dumps(counts))
    print(f"imported {sum(counts.values())} entries into the store; remove them from {resources.path} "
          "now (an entry in both is refused as a repeated name)", file=sys.stderr)
    return 0


def cmd_webhooks(args: argparse.Namespace) -> int:
    from transfer_platform.store.resources import ResourceStore
    from transfer_platform.webhooks.delivery import deliver_due

    report = deliver_due(ResourceStore(args.config).engine)
    print(report.summary())
    return 1 if report.failed else 0


def cmd_magic_link(args: argparse.Namespace) -> int:
    from transfer_platform.api.links import create_link
    from transfer_platform.store.resources import NotFound, ResourceStore

    try:
        url = create_link(ResourceStore(args.config), args.recipient, actor="cli", redirect_url=args.redirect_url)
    except NotFound as exc:
        return _failed(f"{exc} (list them: GET /recipients)")
    print(url)
    return 0


def cmd_sharing_token(args: argparse.Namespace) -> int:
    """A recipient's Delta Sharing token: create and rotate print its profile file (or write it to
    --profile), list shows the tokens without them, revoke ends the recipient's token."""
    from transfer_platform.api.edge import api_settings
    from transfer_platform.sharing import tokens
    from transfer_platform.store.resources import Conflict, NotFound, ResourceStore

    resources = ResourceStore(args.config)
    if args.action != "list" and not args.recipient:
        return _failed(f"sharing-token {args.action} needs the recipient's name or id", 2)
    if args.action in ("list", "revoke") and (args.days is not None or args.profile):
        return _failed("--days and --profile are for create and rotate; fix: drop them", 2)
    try:
        name = tokens.recipient_name(resources, args.recipient) if args.recipient else None
        if args.action == "list":
            print(json.dumps(tokens.listing(resources.engine, name), indent=2))
            return 0
        if args.action == "revoke":
            tokens.revoke(resources.engine, name, actor="cli")
            print(f"revoked the sharing token of {name}")
            return 0
        days = tokens.DEFAULT_DAYS if args.days is None else args.days
        if not 0 < days <= tokens.MAX_DAYS:
            return _failed(f"--days {days}: a token lasts more than 0 and at most {tokens.MAX_DAYS} days", 2)
        shown, token = tokens.issue(resources.engine, name, actor="cli", days=days, rotate=args.action == "rotate")
    except (NotFound, Conflict) as exc:
        fix = f"; fix: {exc.fix}" if getattr(exc, "fix", "") else ""
        return _failed(f"{exc}{fix}")
    endpoint = api_settings(resources.file_raw).public_url.rstrip("/") + "/delta-sharing"
    document = json.dumps(tokens.profile(endpoint, token, shown["expires_at"]), indent=2)
    if args.profile:
        descriptor = os.open(args.profile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(descriptor, 0o600)  # an existing file too: the token is a secret
        with os.fdopen(descriptor, "w") as file:
            file.write(document + "\n")
        print(f"wrote the profile file of {name} to {args.profile} (until {shown['expires_at']})", file=sys.stderr)
    else:
        print(document)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from transfer_platform.demo.run import run_demo
    from transfer_platform.runtime.shared_spark import shared_from_env

    shared = not args.no_shared_spark and shared_from_env() is not False
    return 0 if run_demo(Path(args.dir), verbose=args.verbose, shared=shared) else 1


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line (exit 2), pointing at ``--help``."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


ENVIRONMENT = f"""environment:
  TRANSFER_PLATFORM_CONFIG   the configuration file when --config is not given
  {LOG_LEVEL_ENV}  DEBUG, INFO, WARNING (default; INFO with --verbose), ERROR
  DAGSTER_HOME               the Dagster instance of --enqueue, transfers and cancel
  TRANSFER_PLATFORM_SHARED_SPARK  0 runs Spark inside each command (as --no-shared-spark)
  TRANSFER_PLATFORM_STATE_DIR     the shared Spark server's state and log (default ~/.cache/transfer_platform/spark)
  TRANSFER_PLATFORM_COMMAND_SERVER_IDLE_SECONDS  the resident command process's idle stop (default 1800)
  TRANSFER_PLATFORM_SECRET_KEY    the key secrets sent to the REST API are stored with (store new-key)

output: stdout holds the result (JSON, a transfer id, a table); progress, warnings and errors go
to stderr. Exit 0: done; 1: a failure at run time; 2: a configuration or usage error."""


def build_parser() -> argparse.ArgumentParser:
    from transfer_platform.runtime.shared_spark import _package_version

    # --config and --verbose are accepted before and after the subcommand (a subcommand's copy
    # leaves the value alone unless it is given there: its default is SUPPRESS)
    def options(target: argparse.ArgumentParser, default: bool) -> None:
        target.add_argument("--config", metavar="PATH", default=None if default else argparse.SUPPRESS,
                            help="configuration file (default: $TRANSFER_PLATFORM_CONFIG, else "
                                 "./transfer_platform.yaml)")
        target.add_argument("-v", "--verbose", action="store_true", default=False if default else argparse.SUPPRESS,
                            help="show Spark's and Dagster's own output (the JVM's banner, log and Java "
                                 "stack traces), INFO log lines, and a traceback with any error")
        target.add_argument("--no-shared-spark", action="store_true",
                            default=False if default else argparse.SUPPRESS,
                            help="run Spark inside this command (~11 s to start) instead of the shared Spark "
                                 "server that commands start in the background on first use and reuse "
                                 "(without spark.remote; also spark.shared: false, "
                                 "TRANSFER_PLATFORM_SHARED_SPARK=0)")

    common = argparse.ArgumentParser(add_help=False)
    options(common, default=False)
    parser = _Parser(prog="transfer-platform", description=__doc__, epilog=ENVIRONMENT,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    options(parser, default=True)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, description: str = "") -> argparse.ArgumentParser:
        text = textwrap.fill(f"{summary[0].upper()}{summary[1:]}. {description}".strip(), width=100)
        return sub.add_parser(name, help=summary, description=text,
                              parents=[common], epilog=ENVIRONMENT, formatter_class=argparse.RawDescriptionHelpFormatter)

    def of_models(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        """A command on a destination's models: the destination, ``--model`` to choose some."""
        parser.add_argument("destination", help="the destination's name in the configuration")
        parser.add_argument("--model", action="append", metavar="MODEL", help="only this model (repeatable)")
        return parser

    command("validate", "check the configuration and print every problem with its fix",
            "Exit 2 if there is any. A secret whose environment variable is not set here is a warning "
            "(exit 0): validate may run where secrets are not set, such as CI; a transfer refuses to "
            "start without it.")
    transfer = of_models(command("transfer", "transfer a destination's models now",
                                 "Runs here, in this process (progress on stderr, a JSON summary per model on "
                                 "stdout), or with --enqueue through the Dagster instance's queue. Before Spark "
                                 "starts, the configuration, the secrets' variables and --start/--end are checked."))
    transfer.add_argument("--full-refresh", action="store_true",
                          help="start again from the configured start and reset the watermark")
    transfer.add_argument("--start", type=_moment, metavar="TIME",
                          help="start_transfer_window_at (ISO-8601, inclusive; UTC unless a zone is given)")
    transfer.add_argument("--end", type=_moment, metavar="TIME",
                          help="end_transfer_window_at (ISO-8601, exclusive; UTC unless a zone is given)")
    transfer.add_argument("--tag", type=_tag, action=_Tags, default={}, metavar="KEY=VALUE",
                          help="label the transfer (repeatable; ^[A-Za-z0-9_-]+$ on both sides; with --enqueue: "
                               "the labels are kept with the transfer in the instance)")
    transfer.add_argument("--enqueue", action="store_true",
                          help="submit to the Dagster instance's queue ($DAGSTER_HOME; limits apply) "
                               "and print the transfer id alone on stdout, instead of running here")
    transfer.add_argument("--dry-run", action="store_true",
                          help="print the windows that would move, their read bounds and row counts "
                               "(a COUNT run by the source); change nothing anywhere")
    probe = command("test-connection", "check that a source or destination is reachable and grants every "
                    "right transfers need", "One line per check; exit 1 if any fails; changes nothing.")
    probe.add_argument("name", metavar="SOURCE_OR_DESTINATION", help="a source's or destination's name")
    of_models(command("integrity", "compare a destination's rows with its sources' (integrity checks)",
                      "Per model: (primary key, last-modified) of the recipient's source rows against "
                      "the destination's, as the Dagster asset check does: rows compared, missing, "
                      "stale, incorrect, orphaned and pending as JSON on stdout, what each failure "
                      "means and its fix on stderr. Exit 1 unless every model is clean. Changes nothing."))
    of_models(command("sweep-deletes", "remove a destination's rows whose key is gone from the source, now",
                      "For models with delete_detection: sweep."))
    listing = command("transfers", "list transfers with status and metrics ($DAGSTER_HOME)",
                      "Newest first; times are ISO-8601 with their zone (UTC), duration from start to end.")
    listing.add_argument("--destination", help="only this destination's transfers")
    listing.add_argument("--status", choices=STATUSES, help="only transfers in this status")
    listing.add_argument("--tag", type=_tag_filter, action=_Tags, default={}, metavar="KEY.VALUE",
                         help="only transfers with this tag (repeatable: all must match)")
    listing.add_argument("--ended-before", type=_moment, metavar="TIME", help="ended before this time (exclusive)")
    listing.add_argument("--ended-after", type=_moment, metavar="TIME", help="ended at or after this time (inclusive)")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    listing.add_argument("--json", action="store_true", help="JSON with every field, instead of a table")
    cancel = command("cancel", "cancel a pending transfer or stop a running one")
    cancel.add_argument("transfer_id", help="the id `transfer --enqueue` printed (or `transfers` lists)")
    command("signing-key", "print a new Ed25519 key pair for signing object-storage manifests",
            "The private key goes into the variable a destination's signing_key names; the public key "
            "to consumers.")
    server = command("spark-server", "run the Spark Connect server that transfers share (spark.remote)",
                     "With the file's spark settings, in the foreground, until stopped.")
    server.add_argument("--host", help="address to listen on (default: spark.remote's host, else 127.0.0.1)")
    server.add_argument("--port", type=int, help="port (default: spark.remote's port, else 15002)")
    server.add_argument("--stop", action="store_true",
                        help="stop the shared Spark servers that commands started in the background "
                             "(those of $TRANSFER_PLATFORM_STATE_DIR, default ~/.cache/transfer_platform/spark), "
                             "and exit")
    api = command("api", "serve the REST API (Prequel's export API over the store; see docs/api.md)",
                  "Migrates the store first. Needs the file's store: section and "
                  "$TRANSFER_PLATFORM_SECRET_KEY.")
    api.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    api.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    keys = command("api-key", "create or revoke the API keys the REST API accepts",
                   "create prints the new key once, alone on stdout; the store keeps only its hash.")
    keys.add_argument("action", choices=["create", "revoke"], help="create a key, or revoke one")
    keys.add_argument("name", help="the key's name (create), or its name or id (revoke)")
    keys.add_argument("--scope", choices=["read", "transfers", "admin"], default=None,
                      help="what a new key may do: read (GET routes but webhooks), transfers (also request "
                           "and cancel transfers, run checks), admin (everything, the default: the backend "
                           "that creates recipients and destinations needs it; give a dashboard read)")
    stored = command("store", "the control plane's store: migrate its tables, import the file, make a key",
                     "migrate: create or upgrade the store's tables. import: copy the file's sources, "
                     "models, recipients and destinations into the store (then remove them from the "
                     "file). new-key: print a new key for $TRANSFER_PLATFORM_SECRET_KEY.")
    stored.add_argument("action", choices=["migrate", "import", "new-key"], help="what to do (above)")
    hooks = command("webhooks", "deliver the webhook events that are due now",
                    "As the daemon's webhook_delivery sensor does each tick (for a cron job, or a "
                    "deployment without the daemon): fans new events out to the subscriptions, "
                    "then makes every due delivery once. Prints a summary; exit 1 if a delivery failed.")
    hooks.add_argument("action", choices=["deliver"], help="what to do (above)")
    link = command("magic-link", "create a one-time link a recipient opens to connect its own destination",
                   "Prints the link's URL alone on stdout; it expires after api.magic_link_hours.")
    link.add_argument("recipient", help="the recipient's name or id")
    link.add_argument("--redirect-url", help="where the form sends the recipient after saving")
    sharing = command("sharing-token", "a recipient's Delta Sharing bearer token: create, rotate, revoke, list",
                      "create and rotate print the recipient's profile file (its token shown only there) "
                      "or write it to --profile; rotate revokes the token it replaces; see docs/sharing.md.")
    sharing.add_argument("action", choices=["create", "rotate", "revoke", "list"], help="what to do (above)")
    sharing.add_argument("recipient", nargs="?", help="the recipient's name or id (list: optional)")
    sharing.add_argument("--days", type=float, default=None, help="how long the token works (default 90)")
    sharing.add_argument("--profile", help="write the profile file here (mode 0600) instead of stdout")
    demo = command("demo", "run the embedded demo (no server to install or start)")
    demo.add_argument("--dir", default="demo_output",
                      help="working folder: new, empty, or an earlier demo's (then emptied); any other "
                           "folder is refused")
    return parser


class _LineFormatter(logging.Formatter):
    """``warning: message`` (the level in lower case, like the command's own lines)."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {super().format(record)}"


def _without_error_phase(record: logging.LogRecord) -> bool:
    """Not the ``error`` phase record of a failed model (a JSON line for a log): the command
    prints that failure itself, once, as its ``error:`` line. It stays in a log asked for."""
    return not record.getMessage().startswith('{"phase": "error"')


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (a progress bar swaps it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _configure_logging(verbose: bool) -> str | None:
    """Set the log level ($TRANSFER_PLATFORM_LOG_LEVEL, else WARNING, INFO with --verbose) and
    the lines' format (timestamped below WARNING); the error, if the variable names no level."""
    name = os.environ.get(LOG_LEVEL_ENV) or ("INFO" if verbose else "WARNING")
    level = logging.getLevelName(name.strip().upper())
    if not isinstance(level, int):
        return (f"${LOG_LEVEL_ENV}={name!r} is not a log level; fix: set it to DEBUG, INFO, WARNING "
                "or ERROR, or unset it")
    handler = _StderrHandler()
    # a log asked for (--verbose, or INFO/DEBUG) gets each line's time, level and logger; the
    # default (warnings and errors only) reads as the command's own words
    if verbose or level < logging.WARNING:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    else:
        handler.setFormatter(_LineFormatter("%(message)s"))
        handler.addFilter(_without_error_phase)
    logging.basicConfig(level=level, handlers=[handler], force=True)
    # the level chosen here holds for the platform's own records, whatever set its logger before
    # in this process (a Dagster run's managed loggers, in a process that ran one)
    logging.getLogger("transfer_platform").setLevel(logging.NOTSET)
    return None


#: commands that take no configuration file, and why: a --config given to them is refused, not ignored
_READS_NO_CONFIG = {
    "demo": "it writes its own into --dir",
    "signing-key": "it only makes a key pair",
    "transfers": "it reads the Dagster instance in $DAGSTER_HOME",
    "cancel": "it acts on the Dagster instance in $DAGSTER_HOME",
}


def main(argv: list[str] | None = None) -> int:
    args = _PARSER.parse_args(argv)
    problem = _configure_logging(args.verbose)
    if problem:
        return _failed(problem, 2)
    handlers = {"validate": cmd_validate, "transfer": cmd_transfer, "transfers": cmd_transfers,
                "cancel": cmd_cancel, "demo": cmd_demo, "test-connection": cmd_test_connection,
                "sweep-deletes": cmd_sweep_deletes, "signing-key": cmd_signing_key,
                "spark-server": cmd_spark_server, "integrity": cmd_integrity, "api": cmd_api,
                "api-key": cmd_api_key, "store": cmd_store, "magic-link": cmd_magic_link,
                "webhooks": cmd_webhooks, "sharing-token": cmd_sharing_token}
    if args.config is not None and args.command in _READS_NO_CONFIG:
        return _failed(f"{args.command} reads no configuration file ({_READS_NO_CONFIG[args.command]}): "
                       "drop --config", 2)
    try:
        return handlers[args.command](args)
    except TransferPlatformError as exc:
        if args.verbose:
            logging.getLogger("transfer_platform").error("traceback", exc_info=True)
        for line in error_lines(exc):
            print(line, file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except KeyboardInterrupt:
        return _failed("interrupted (windows committed before the interrupt are kept; run the transfer "
                       "again to continue)", 130)
    except Exception as exc:  # the command line ends with one line, not a traceback
        if args.verbose:
            logging.getLogger("transfer_platform").error("traceback", exc_info=True)
        return _failed(f"unexpected {_one_line(exc)}" + ("" if args.verbose else " (run again with "
                       "--verbose for the traceback)"))


#: the parser, built once per process: a resident command process builds it before it forks
#: (building it costs 0.02 s on a quiet machine, 0.2 s on two busy cores)
_PARSER = build_parser()


if __name__ == "__main__":
    sys.exit(main())
