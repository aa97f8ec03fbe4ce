"""``transfer-platform``: validate the configuration, run a transfer now, run the demo."""

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
    on_window = None
    if os.environ.get("DAGSTER_HOME"):
        from dagster import DagsterInstance

        from transfer_platform.orchestration.reporting import report_window

        instance = DagsterInstance.get()

        def on_window(model, outcome):
            report_window(instance, config, destination.name, model, outcome)

    writer = writer_for(destination)
    transfer_id = uuid.uuid4().hex
    request = TransferRequest(spark=get_spark_session(config.spark), config=config,
                              destination=destination.name, writer=writer, transfer_id=transfer_id,
                              now=datetime.now(UTC), full_refresh=args.full_refresh,
                              log=logging.getLogger("transfer_platform.transfer"))
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
    demo = sub.add_parser("demo", help="run the embedded demo (no server needed)")
    demo.add_argument("--dir", default="demo_output", help="working folder (recreated)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("TRANSFER_PLATFORM_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    handlers = {"validate": cmd_validate, "transfer": cmd_transfer, "demo": cmd_demo}
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
