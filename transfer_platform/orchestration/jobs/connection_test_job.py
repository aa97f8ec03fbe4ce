"""The ``test_connection`` job: ``transfer-platform test-connection`` from the Dagster UI.

Launch it from the launchpad with ``ops: {check_connection: {config: {name: <source or
destination>}}}``. Each check is one log line; the run's output carries them all as metadata, and
the run fails, naming each refused right and its fix, when any check fails. Nothing is left
behind in the source or destination (see ``transfers/connection_test.py``).
"""

from dagster import Config, Failure, MetadataValue, OpExecutionContext, Output, job, op
from pydantic import Field

from transfer_platform.orchestration.catalog.resources import TransferPlatformResource
from transfer_platform.transfers.connection_test import lines, run_connection_test


class ConnectionTestConfig(Config):
    name: str = Field(description="a source or destination of the configuration file")


@op(name="check_connection", description="check reachability, login and every right transfers need")
def connection_test_op(context: OpExecutionContext, config: ConnectionTestConfig,
                       platform: TransferPlatformResource) -> Output:
    checks = run_connection_test(platform.config, config.name)
    for check in checks:
        (context.log.error if check.failed else context.log.info)(check.line())
    failed = [c for c in checks if c.failed]
    metadata = {"checks": MetadataValue.json([c.as_dict() for c in checks]),
                "summary": MetadataValue.text(list(lines(checks))[-1]), "failed": len(failed)}
    if failed:
        raise Failure(description="\n".join(c.line() for c in failed), metadata=metadata)
    return Output(None, metadata=metadata)


@job(name="test_connection", description="Test a source or destination: reachability, login and "
                                         "every right the transfers need (ops.check_connection.config.name).")
def connection_test_job():
    connection_test_op()
