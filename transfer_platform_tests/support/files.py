"""Snapshots of folders: every file with its size and modification time (to show nothing changed)."""

from __future__ import annotations

from pathlib import Path


def tree(root: Path) -> dict[str, tuple] | None:
    """Every path under ``root`` with its kind, size and modification time (None: no folder)."""
    if not root.exists():
        return None
    paths = [root, *sorted(root.rglob("*"))]
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns) for p in paths}
