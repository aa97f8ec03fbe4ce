"""A cancel's interrupt lands wherever the step is: often while it writes an event, outside the
transfer's own frame. ``reporting.relay`` throws it into the transfer there, so the models'
``last_transfer`` outcomes of a stopped transfer are recorded whatever the step was doing."""

from __future__ import annotations

import pytest

from transfer_platform.orchestration.catalog.reporting import relay


def transfer_events(seen: list):
    """The shape of ``reporting.transfer_events``: events, and on an exception the outcomes of a
    stopped transfer, then the exception again."""
    try:
        yield from ("w1", "w2", "w3")
    except BaseException as exc:
        seen.append(exc)
        yield "stopped: items"
        yield "stopped: notes"
        raise
    yield "ended: items"


def test_every_event_is_handled_in_order_when_nothing_goes_wrong():
    handled = []
    assert list(relay(transfer_events([]), lambda e: (handled.append(e), [e.upper()])[1])) == [
        "W1", "W2", "W3", "ENDED: ITEMS"]
    assert handled == ["w1", "w2", "w3", "ended: items"]


@pytest.mark.parametrize("interrupted", [KeyboardInterrupt, RuntimeError])
def test_an_exception_while_an_event_is_handled_is_reported_as_the_transfers_then_raised(interrupted):
    seen, handled = [], []

    def handle(event):
        handled.append(event)
        if event == "w2":  # an interrupt while the step writes w2
            raise interrupted("cancelled")
        return ()

    with pytest.raises(interrupted, match="cancelled"):
        list(relay(transfer_events(seen), handle))
    assert [type(e) for e in seen] == [interrupted]  # the transfer saw it where it stopped
    assert handled == ["w1", "w2", "stopped: items", "stopped: notes"]  # its outcomes still written


def test_a_second_interrupt_while_a_stopped_transfer_reports_does_not_cut_the_report_short():
    """A cancelled run is interrupted twice: by its launcher, then by Dagster's cancellation thread
    when it sees the run CANCELING. The second may land while the first's outcomes are written;
    every model still gets its outcome, and the process's interrupt handler is back afterwards."""
    import os
    import signal
    from dataclasses import dataclass

    import dagster as dg

    from transfer_platform.orchestration.catalog.reporting import (
        transfer_events as real_transfer_events,
    )

    @dataclass
    class Model:
        model_name: str

    class StoppedTransfer:  # the Transfer's interface: its models, run() and summaries
        models = [Model("items"), Model("notes")]
        summaries: list = []

        def run(self):
            raise KeyboardInterrupt("cancelled by a user")
            yield  # a generator

    @dg.op
    def noop():
        return None

    @dg.job
    def job():
        noop()

    keys = {"items": dg.AssetKey(["acme", "d", "items"]), "notes": dg.AssetKey(["acme", "d", "notes"])}
    handled = []
    before = signal.getsignal(signal.SIGINT)  # Python's, or one a library installed (a SparkContext's)

    def handle(event):
        handled.append(event)
        if len(handled) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # the cancellation thread's interrupt, while writing
        return ()

    with dg.instance_for_test() as instance:
        run = instance.create_run_for_job(job_def=job)
        with pytest.raises(KeyboardInterrupt):
            list(relay(real_transfer_events(instance, run.run_id, StoppedTransfer(), keys), handle))
    assert [e.asset_key.path[-1] for e in handled] == ["items", "notes"]
    assert signal.getsignal(signal.SIGINT) is before
