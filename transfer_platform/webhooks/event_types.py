"""The event types a webhook can subscribe to (pure)."""

from __future__ import annotations

#: Prequel's transfer statuses that are events, and the event type of each
TRANSFER_EVENTS = {
    "ERROR": "transfer.error",
    "PARTIAL_FAILURE": "transfer.partial_failure",
    "SUCCESS": "transfer.success",
    "EXPIRED": "transfer.expired",
    "ORPHANED": "transfer.orphaned",
}
INTEGRITY_CHECK_FAILED = "integrity_check.failed"
#: what the store emits for each change made through the API (``<kind>.created|updated|deleted``)
RESOURCE_EVENTS = tuple(f"{kind}.{change}" for kind in ("destination", "recipient", "source", "model")
                        for change in ("created", "updated", "deleted"))
MAGIC_LINK_USED = "magic_link.used"

EVENT_TYPES: tuple[str, ...] = (*TRANSFER_EVENTS.values(), INTEGRITY_CHECK_FAILED, *RESOURCE_EVENTS,
                                MAGIC_LINK_USED)
FORMATS = ("generic", "slack")
