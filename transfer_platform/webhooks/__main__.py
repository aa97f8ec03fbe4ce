"""``python -m transfer_platform.webhooks deliver [--config PATH]``: fan out new events and make
every due delivery once, as the daemon's ``webhook_delivery`` sensor does each tick (for a cron
job, or a deployment without the daemon)."""

from __future__ import annotations

import argparse
import sys

from transfer_platform.config.loading import read_file
from transfer_platform.errors import ConfigError, Problem
from transfer_platform.store.database import engine_for
from transfer_platform.store.resources import store_settings
from transfer_platform.webhooks.delivery import deliver_due


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transfer_platform.webhooks")
    commands = parser.add_subparsers(dest="command", required=True)
    deliver = commands.add_parser("deliver", help="make every due webhook delivery once")
    deliver.add_argument("--config", help="the configuration file (default: $TRANSFER_PLATFORM_CONFIG, "
                                          "else transfer_platform.yaml)")
    args = parser.parse_args(argv)
    try:
        path, raw = read_file(args.config)
        settings = store_settings(raw, str(path))
        if settings is None:
            raise ConfigError([Problem("store", "the configuration file has no store: no webhooks",
                                       "add a store: section (see docs/api.md)")], source=str(path))
        report = deliver_due(engine_for(settings.connection))
    except ConfigError as exc:
        print(exc, file=sys.stderr)  # noqa: T201 - a command's answer
        return 2
    print(report.summary())  # noqa: T201 - a command's answer
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
