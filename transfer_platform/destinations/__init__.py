"""Destinations: stage a batch, merge it with its watermark in one commit, clean up; the order is
``skeleton.Writer``'s, each vendor implements its primitives."""

from transfer_platform.destinations.base import (
    DestinationWriter,
    WindowLoad,
    WindowResult,
    writer_for,
)

__all__ = ["DestinationWriter", "WindowLoad", "WindowResult", "writer_for"]
