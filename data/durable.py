"""Making a file, or a folder's list of names, durable: the one fsync helper of doxa's side files."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: str | Path) -> None:
    """fsync a file or a folder (a folder: its entries, so that a rename into it survives a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["fsync_path"]
