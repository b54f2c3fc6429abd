"""Making a file, or a folder's list of names, durable: the fsync and rename helpers of doxa's side files."""

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


def rename_into_place(temporary: Path, final: Path, *, durable: bool = True) -> None:
    """Give a fully written ``temporary`` file its ``final`` name, atomically; ``durable``: the
    contents and the new name survive a crash (fsync of the file before, of the folder after)."""
    if durable:
        fsync_path(temporary)
    os.replace(temporary, final)
    if durable:
        fsync_path(final.parent)


__all__ = ["fsync_path", "rename_into_place"]
