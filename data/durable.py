"""Making a file, or a folder's list of names, durable: the fsync and rename helpers of doxa's side files;
and where those side files live (:func:`beside_store`)."""

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


def store_file(db_path: str | os.PathLike) -> str:
    """The file a store path names: ``db_path`` itself, or the file a symlink in it leads to.

    A path without a symlink is returned as given (relative stays relative); one through a
    symlink as the real path, so that every process reaches the same file and the same side
    files whichever name it was given.
    """
    path = str(db_path)
    if path == ":memory:":
        return path
    real = os.path.realpath(path)
    return path if real == os.path.abspath(path) else real


def beside_store(db_path: str | os.PathLike, suffix: str) -> Path:
    """The side file or folder ``<store file><suffix>`` (``.reads``, ``.beliefs``, ``.posterior``): the
    one place its path is derived, keyed by the real file (:func:`store_file`)."""
    return Path(store_file(db_path) + suffix)


__all__ = ["fsync_path", "rename_into_place", "store_file", "beside_store"]
