"""A cancel's interrupt lands wherever the step is: often while it writes an event, outside the
transfer's own frame. ``reporting.relay`` throws it into the transfer there, so the models'
``last_transfer`` outcomes of a stopped transfer are recorded whatever the step was doing."""

from __future__ import annotations

import pytest

from transfer_platform.orchestration.reporting import relay


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
