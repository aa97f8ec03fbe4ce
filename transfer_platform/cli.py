"""``transfer-platform``: validate the configuration; test a source or destination; run or enqueue
a transfer; list and cancel transfers; run the demo."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

from transfer_platform.config import find_config_path, load_config
from transfer_platform.core.lifecycle import STATUSES
from transfer_platform.errors import ConfigError, TransferPlatformError


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def cmd_validate(args: argparse.Namespace) -> int:
    path = find_config_path(args.config)
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(f"{path}: valid ({len(config.sources)} source(s), {len(config.models)} model(s), "
          f"{len(config.recipients)} recipient(s), {len(config.destinations)} destination(s))")
    return 0


def cmd_transfer(args: argparse.Namespace) -> int:
    from transfer_platform.destinations.base import writer_for
    from transfer_platform.spark_session import get_spark_session
    from transfer_platform.transfers.runner import TransferRequest, run_transfer

    if args.enqueue and args.dry_run:
        print("error: --dry-run plans here, in this process, and cannot be enqueued: drop --enqueue "
              "(in Dagster, launch the transfer job with dry_run: true in its op config)", file=sys.stderr)
        return 2
    if args.enqueue:
        return _enqueue(args)
    if args.tag:
        print("error: --tag labels a transfer in the Dagster instance's transfer list, and a transfer run "
              "here, in this process, is not listed there: add --enqueue to run it through the queue with "
              "its tags, or drop --tag", file=sys.stderr)
        return 2
    config = load_config(args.config)
    destination = config.destination(args.destination)
    models = config.models_for(destination)
    if args.model:
        known = {m.model_name for m in models}
        unknown = [m for m in args.model if m not in known]
        if unknown:
            raise ConfigError(f"destination {destination.name!r} does not receive model(s) {unknown}; "
                              f"it receives: {sorted(known)}")
        models = [m for m in models if m.model_name in args.model]
    if args.dry_run:
        return _dry_run(args, config, destination.name, models)
    on_window = None
    if os.environ.get("DAGSTER_HOME"):
        from dagster import DagsterInstance

        from transfer_platform.orchestration.reporting import RunlessReporter

        on_window = RunlessReporter(DagsterInstance.get(), config, destination.name)

    writer = writer_for(destination)
    transfer_id = uuid.uuid4().hex
    request = TransferRequest(spark=get_spark_session(config.spark), config=config,
                              destination=destination.name, writer=writer, transfer_id=transfer_id,
                              now=datetime.now(UTC), full_refresh=args.full_refresh,
                              log=logging.getLogger("transfer_platform.transfer"),
                              start=args.start, end=args.end)
    try:
        summaries = run_transfer(request, models, on_window=on_window)
    finally:
        writer.close()
    failed = [s for s in summaries if s.status != "SUCCESS"]
    status = "SUCCESS" if not failed else ("ERROR" if len(failed) == len(summaries) else "PARTIAL_FAILURE")
    print(json.dumps({"transfer_id": transfer_id, "destination": destination.name, "status": status,
                      "models": [s.as_dict() for s in summaries]}, indent=2))
    if failed:
        print(f"error: {failed[0].model}: {failed[0].error}", file=sys.stderr)
        return 1
    return 0


def _dry_run(args: argparse.Namespace, config, destination: str, models) -> int:  # noqa: ANN001
    """Print the plan of the transfer (windows, read bounds, row counts); change nothing."""
    from transfer_platform.spark_session import get_spark_session
    from transfer_platform.transfers.dry_run import plan_as_dict, plan_transfer

    now = datetime.now(UTC)
    plans = plan_transfer(get_spark_session(config.spark), config, destination, models, now,
                          full_refresh=args.full_refresh, start=args.start, end=args.end)
    print(json.dumps(plan_as_dict(destination, now, plans), indent=2))
    failed = [p for p in plans if p.error is not None]
    if failed:
        print(f"error: {failed[0].model}: {failed[0].error}", file=sys.stderr)
        return 1
    return 0


def _instance():  # -> DagsterInstance
    from dagster import DagsterInstance

    if not os.environ.get("DAGSTER_HOME"):
        raise ConfigError("DAGSTER_HOME is not set: the queue and the transfer list live in a Dagster "
                          "instance (export DAGSTER_HOME=... with the dagster.yaml of this repository)")
    return DagsterInstance.get()


def _enqueue(args: argparse.Namespace) -> int:
    from transfer_platform.orchestration.transfers import TransferOrder, enqueue

    path = find_config_path(args.config)
    config = load_config(path)
    order = TransferOrder(destination=args.destination, models=args.model or [], full_refresh=args.full_refresh,
                          start=args.start, end=args.end, tags=args.tag)
    with _instance() as instance:
        print(enqueue(instance, config, path, order))
    return 0


def cmd_test_connection(args: argparse.Namespace) -> int:
    from transfer_platform.transfers.connection_test import lines, run_connection_test

    checks = run_connection_test(load_config(args.config), args.name)
    for line in lines(checks):
        print(line)
    return 1 if any(check.failed for check in checks) else 0


def cmd_sweep_deletes(args: argparse.Namespace) -> int:
    from transfer_platform.spark_session import get_spark_session
    from transfer_platform.transfers.delete_sweep import sweep_deletes

    config = load_config(args.config)
    destination = config.destination(args.destination)
    swept = [m for m in config.models_for(destination) if m.delete_detection == "sweep"]
    models = [m for m in swept if not args.model or m.model_name in args.model]
    unknown = sorted(set(args.model or []) - {m.model_name for m in swept})
    if unknown or not models:
        raise ConfigError(f"destination {destination.name!r} sweeps no model(s) {unknown or '(none given)'}; "
                          f"models with delete_detection: sweep there: {[m.model_name for m in swept]}")
    spark, sweep_id, failed = get_spark_session(config.spark), uuid.uuid4().hex, []
    reports = []
    for model in models:
        try:
            reports.append(sweep_deletes(spark, config, destination.name, model, datetime.now(UTC), sweep_id).as_dict())
        except TransferPlatformError as exc:
            reports.append({"destination": destination.name, "model": model.model_name, "error": str(exc)})
            failed.append(f"{model.model_name}: {exc}")
    print(json.dumps({"sweep_id": sweep_id, "models": reports}, indent=2))
    if failed:
        print(f"error: {failed[0]}", file=sys.stderr)
        return 1
    return 0


def cmd_transfers(args: argparse.Namespace) -> int:
    from transfer_platform.orchestration.lifecycle import sweep
    from transfer_platform.orchestration.transfers import TransferFilter, list_transfers

    with _instance() as instance:
        sweep(instance, datetime.now(UTC))
        found = list_transfers(instance, TransferFilter(
            destination=args.destination, status=args.status, tags=args.tag,
            ended_before=args.ended_before, ended_after=args.ended_after, limit=args.limit))
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    print(f"{'id':36}  {'destination':14} {'status':15} {'submitted_at':25} {'ended_at':25} "
          f"{'rows':>8} {'delta':>8} {'mb':>8}  tags")
    for t in found:
        print(f"{t['id']:36}  {t['destination'] or '-':14} {t['status']:15} {t['submitted_at'][:25]:25} "
              f"{(t['ended_at'] or '-')[:25]:25} {t['rows_transferred']:>8} {t['delta_rows_transferred']:>8} "
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
    from transfer_platform.orchestration.transfers import cancel

    with _instance() as instance:
        try:
            status = cancel(instance, args.transfer_id)
        except LookupError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(f"{args.transfer_id}: {status}")
    return 0


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO-8601 time (e.g. 2025-01-31T00:00:00Z)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _tag(text: str) -> tuple[str, str]:
    from transfer_platform.orchestration.run_tags import parse_user_tags

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
    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
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
    from transfer_platform.spark_session import (
        DEFAULT_CONNECT_PORT,
        Endpoint,
        remote_endpoint,
        serve,
    )

    path = find_config_path(args.config)
    named = args.config or os.environ.get("TRANSFER_PLATFORM_CONFIG")
    settings = load_config(path).spark if named or path.is_file() else None  # else the defaults
    endpoint = remote_endpoint(settings) or Endpoint("127.0.0.1", DEFAULT_CONNECT_PORT)
    endpoint = Endpoint(args.host or endpoint.host, args.port or endpoint.port)
    serve(settings, endpoint, ready=lambda message: print(message, flush=True))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from transfer_platform.demo.run import run_demo

    return 0 if run_demo(Path(args.dir)) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transfer-platform", description=__doc__)
    parser.add_argument("--config", help="configuration file (default: $TRANSFER_PLATFORM_CONFIG, "
                                         "else ./transfer_platform.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("validate", help="check the configuration and print every problem with its fix")
    transfer = sub.add_parser("transfer", help="transfer a destination's models now")
    transfer.add_argument("destination")
    transfer.add_argument("--model", action="append", help="only this model (repeatable)")
    transfer.add_argument("--full-refresh", action="store_true",
                          help="start again from the configured start and reset the watermark")
    transfer.add_argument("--start", type=_moment, help="start_transfer_window_at (ISO-8601, inclusive)")
    transfer.add_argument("--end", type=_moment, help="end_transfer_window_at (ISO-8601, exclusive)")
    transfer.add_argument("--tag", type=_tag, action=_Tags, default={}, metavar="KEY=VALUE",
                          help="label the transfer (repeatable; ^[A-Za-z0-9_-]+$ on both sides; with --enqueue: "
                               "the labels are kept with the transfer in the instance)")
    transfer.add_argument("--enqueue", action="store_true",
                          help="submit to the Dagster instance's queue ($DAGSTER_HOME; limits apply) "
                               "and print the transfer id, instead of running here")
    transfer.add_argument("--dry-run", action="store_true",
                          help="print the windows that would move, their read bounds and row counts "
                               "(a COUNT run by the source); change nothing anywhere")
    probe = sub.add_parser("test-connection", help="check that a source or destination is reachable and "
                                                   "grants every right transfers need (one line per "
                                                   "check; exit 1 if any fails); changes nothing")
    probe.add_argument("name", metavar="SOURCE_OR_DESTINATION")
    sweep = sub.add_parser("sweep-deletes", help="remove a destination's rows whose key is gone from the "
                                                 "source (models with delete_detection: sweep), now")
    sweep.add_argument("destination")
    sweep.add_argument("--model", action="append", help="only this model (repeatable)")
    listing = sub.add_parser("transfers", help="list transfers with status and metrics ($DAGSTER_HOME)")
    listing.add_argument("--destination")
    listing.add_argument("--status", choices=STATUSES)
    listing.add_argument("--tag", type=_tag_filter, action=_Tags, default={}, metavar="KEY.VALUE")
    listing.add_argument("--ended-before", type=_moment, help="exclusive")
    listing.add_argument("--ended-after", type=_moment, help="inclusive")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--json", action="store_true")
    cancel = sub.add_parser("cancel", help="cancel a pending transfer or stop a running one")
    cancel.add_argument("transfer_id")
    sub.add_parser("signing-key", help="print a new Ed25519 key pair for signing object-storage manifests "
                                       "(private: the destination's signing_key variable; public: consumers)")
    server = sub.add_parser("spark-server", help="run the Spark Connect server that transfers share "
                                                 "(spark.remote), with the file's spark settings, until stopped")
    server.add_argument("--host", help="address to listen on (default: spark.remote's host, else 127.0.0.1)")
    server.add_argument("--port", type=int, help="port (default: spark.remote's port, else 15002)")
    demo = sub.add_parser("demo", help="run the embedded demo (no server needed)")
    demo.add_argument("--dir", default="demo_output", help="working folder (recreated)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("TRANSFER_PLATFORM_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    handlers = {"validate": cmd_validate, "transfer": cmd_transfer, "transfers": cmd_transfers,
                "cancel": cmd_cancel, "demo": cmd_demo, "test-connection": cmd_test_connection,
                "sweep-deletes": cmd_sweep_deletes, "signing-key": cmd_signing_key,
                "spark-server": cmd_spark_server}
    try:
        return handlers[args.command](args)
    except TransferPlatformError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except Exception as exc:  # noqa: BLE001 - the command line ends with one line, not a traceback
        print(f"error: unexpected {_one_line(exc)} (set TRANSFER_PLATFORM_LOG_LEVEL=DEBUG for details)",
              file=sys.stderr)
        logging.getLogger("transfer_platform").debug("traceback", exc_info=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
