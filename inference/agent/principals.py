"""Principals: who may use `doxa mcp --http --stores DIR`, each with a bearer token and a store of its own.

A folder of stores serves several people from one server without letting anyone into another's
memory. Its layout::

    DIR/                  mode 0700 when doxa makes it
      principals.json     mode 0600: name → SHA-256 of the token, created, revoked
      ana.duckdb          ana's store (and its side files, ana.duckdb.*)
      ben.duckdb          ben's store

A token is 32 random bytes (:func:`new_token`) shown once, when it is made; only its SHA-256
is kept, which is enough for a secret with 256 bits of entropy (no salt or slow hash can add
to that) and means the file alone lets nobody in. The file is rewritten whole into a temporary
file and renamed into place (a crash leaves the old or the new file, never half of one), under
an exclusive lock so that two `doxa tokens` commands do not lose each other's change.

A running server holds a :class:`PrincipalTable`, which re-reads the file when its identity
(inode, size, modification time) changes: a ``stat`` per request, so an added or revoked token
counts from the next request on, without a restart. There is no SQL here: the stores are opened
through :mod:`doxa.data.store` only to create them.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from doxa.data.durable import rename_into_place

#: The file in DIR that names the principals.
PRINCIPALS_FILE = "principals.json"
#: Held (flock) while the principals file is read, changed and written back.
LOCK_FILE = ".principals.lock"
#: A principal's store: DIR/<name><STORE_SUFFIX>.
STORE_SUFFIX = ".duckdb"
FORMAT = "doxa-principals"
VERSION = 1
#: A principal's name: a safe file name on every file system (no dot, no separator, no upper case that
#: a case-insensitive file system would fold onto another name).
NAME_RULE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
NAME_RULE_TEXT = ("1 to 64 characters: lower-case letters a-z, digits, '-' and '_', starting with a letter or "
                  "a digit (it names the store file NAME.duckdb)")


class PrincipalsError(Exception):
    """A refusal about principals, worded for a person: what is wrong and what to do."""


def new_token() -> str:
    """A fresh bearer token: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def token_digest(token: str | bytes) -> str:
    """How a token is kept: ``sha256:`` and the hex SHA-256 of its UTF-8 bytes."""
    data = token.encode("utf-8") if isinstance(token, str) else token
    return "sha256:" + hashlib.sha256(data).hexdigest()


def name_problem(name: str) -> str | None:
    """What is wrong with a principal's name, or None."""
    if NAME_RULE.fullmatch(name):
        return None
    return f"principal name {name!r} is refused: a name is {NAME_RULE_TEXT}, e.g. ana or ben-2"


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class Principal:
    """One principal as the file keeps it: never the token itself."""
    name: str
    digest: str
    created: str
    revoked: str | None = None

    @property
    def active(self) -> bool:
        return self.revoked is None

    def to_json(self) -> dict:
        return {"token_sha256": self.digest, "created": self.created, "revoked": self.revoked}


def principals_file(folder: str | os.PathLike) -> Path:
    return Path(folder) / PRINCIPALS_FILE


def store_path(folder: str | os.PathLike, name: str) -> str:
    """The store of principal ``name`` (which must be a valid name: it becomes part of a path)."""
    if problem := name_problem(name):
        raise PrincipalsError(problem)
    return str(Path(folder) / f"{name}{STORE_SUFFIX}")


def parse(text: str, where: Path) -> dict[str, Principal]:
    """The principals a file's text names; a file doxa did not write is refused by what is wrong in it."""
    fix = "restore it from a backup, or move it away and add the principals again with `doxa tokens add`"
    try:
        data = json.loads(text)
    except ValueError as err:
        raise PrincipalsError(f"{where} is not JSON ({err}); {fix}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("principals"), dict):
        raise PrincipalsError(f"{where} is not a doxa principals file (format {FORMAT!r}); {fix}")
    if data.get("version") != VERSION:
        raise PrincipalsError(f"{where} has version {data.get('version')!r}; this doxa reads version {VERSION}: "
                              f"upgrade doxa")
    out: dict[str, Principal] = {}
    for name, entry in data["principals"].items():
        digest = entry.get("token_sha256") if isinstance(entry, dict) else None
        if name_problem(name) or not isinstance(digest, str) or not digest.startswith("sha256:") \
                or not isinstance(entry.get("created"), str) or not isinstance(entry.get("revoked"), (str, type(None))):
            raise PrincipalsError(f"{where}: the entry of principal {name!r} is malformed (token_sha256 "
                                  f"'sha256:…', created, revoked); {fix}")
        out[name] = Principal(name, digest, entry["created"], entry.get("revoked"))
    return out


def read(folder: str | os.PathLike) -> dict[str, Principal]:
    """The principals of a folder of stores; refused with the fix when the folder or its file is missing."""
    path = principals_file(folder)
    if not Path(folder).is_dir():
        raise PrincipalsError(f"no folder of stores at {folder}: make it and its first principal with "
                              f"`doxa tokens add NAME --stores {folder}`")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PrincipalsError(f"no principals in {folder} ({PRINCIPALS_FILE} is missing): add the first with "
                              f"`doxa tokens add NAME --stores {folder}`") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PrincipalsError(f"cannot read {path}: {err}") from None
    return parse(text, path)


def write(folder: str | os.PathLike, principals: dict[str, Principal]) -> None:
    """Replace the principals file atomically, mode 0600 from its first byte (a temporary file in the same
    folder, fsynced, renamed into place)."""
    final = principals_file(folder)
    body = json.dumps({"format": FORMAT, "version": VERSION,
                       "principals": {n: p.to_json() for n, p in sorted(principals.items())}}, indent=2) + "\n"
    fd, temporary = tempfile.mkstemp(prefix=".principals-", suffix=".tmp", dir=folder)  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(body)
        os.chmod(temporary, 0o600)  # mkstemp's mode, said here so that no umask or platform changes it
        rename_into_place(Path(temporary), final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def locked(folder: str | os.PathLike) -> Iterator[None]:
    """Hold the folder's lock file exclusively: one `doxa tokens` change at a time."""
    import fcntl

    fd = os.open(Path(folder) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def make_folder(folder: str | os.PathLike) -> None:
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise PrincipalsError(f"--stores {folder} is a file, not a folder: name a folder (it is made if absent)")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def exposure(folder: str | os.PathLike) -> str | None:
    """A warning when other users of the machine may enter the folder (its stores are personal data), or None."""
    mode = Path(folder).stat().st_mode & 0o777
    if mode & 0o077 == 0:
        return None
    return (f"{folder} has mode {mode:04o}: other users of this machine may read the stores in it; "
            f"`chmod 700 {folder}` keeps them private")


def add(folder: str | os.PathLike, name: str) -> tuple[Principal, str, bool]:
    """Make principal ``name`` a token, and its store if absent: (the principal, the token, whether the store
    was made). An active principal is refused (its token was shown once and is not kept: revoke it, then add
    it again for a new one); a revoked one gets a new token and keeps its store."""
    from doxa.data.store import Store

    if problem := name_problem(name):
        raise PrincipalsError(problem)
    make_folder(folder)
    with locked(folder):
        principals = read(folder) if principals_file(folder).exists() else {}
        old = principals.get(name)
        if old is not None and old.active:
            raise PrincipalsError(f"principal {name} already has a token (since {old.created}); doxa keeps only "
                                  f"its hash, so it cannot be shown again: to replace it, "
                                  f"`doxa tokens revoke {name} --stores {folder}`, then add it again")
        path = store_path(folder, name)
        made = not Path(path).exists()
        Store.open(path, create=True).close()  # a file that is no doxa store is refused here, before any token
        token = new_token()
        principals[name] = Principal(name, token_digest(token), now_iso())
        write(folder, principals)
    return principals[name], token, made


def revoke(folder: str | os.PathLike, name: str) -> tuple[Principal, bool]:
    """Revoke principal ``name``'s token: (the principal, whether it was already revoked). Its store is kept."""
    if problem := name_problem(name):
        raise PrincipalsError(problem)
    with locked(folder) if Path(folder).is_dir() else contextlib.nullcontext():
        principals = read(folder)
        old = principals.get(name)
        if old is None:
            known = ", ".join(sorted(principals)) or "none"
            raise PrincipalsError(f"no principal {name} in {folder} (principals: {known}); `doxa tokens list "
                                  f"--stores {folder}` lists them")
        if not old.active:
            return old, True
        principals[name] = Principal(name, old.digest, old.created, now_iso())
        write(folder, principals)
    return principals[name], False


class PrincipalTable:
    """The principals a running server admits, read again from the file whenever it changes.

    :meth:`authenticate` takes an ``Authorization`` header and says whose token it carries. The file is
    checked with one ``stat`` per call and re-read only when its inode, size or modification time moved
    (a `doxa tokens` change renames a new file into place: a new inode). When the file cannot be read or
    parsed, every token is refused until it can (fail closed) and the reason is kept in :attr:`problem`.
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = principals_file(folder)
        self.identity: tuple | None = None
        self.principals: dict[str, Principal] = {}
        self.problem: str | None = None
        self.lock = threading.Lock()
        self.refresh()

    def refresh(self) -> None:
        with self.lock:
            try:
                info = os.stat(self.path)
                identity = (info.st_ino, info.st_size, info.st_mtime_ns)
            except OSError as err:
                identity = ("missing", str(err))
            if identity == self.identity:
                return
            try:
                principals, problem = read(self.folder), None
            except PrincipalsError as err:
                principals, problem = {}, str(err)
            self.identity, self.principals, self.problem = identity, principals, problem

    def store_path(self, name: str) -> str:
        return store_path(self.folder, name)

    def authenticate(self, authorization: bytes | None) -> tuple[str | None, str]:
        """(principal name, "") for a header ``Bearer TOKEN`` whose token an active principal holds; else
        (None, why) where why says so without the token. Every kept hash is compared, in constant time."""
        if authorization is None:
            return None, "no bearer token"
        scheme, _, token = authorization.partition(b" ")
        if scheme.lower() != b"bearer" or not token:
            return None, "malformed Authorization header (not Bearer TOKEN)"
        self.refresh()
        digest = token_digest(token).encode("ascii")
        match = None
        for principal in self.principals.values():
            if hmac.compare_digest(principal.digest.encode("ascii"), digest):
                match = principal
        if match is None:
            return None, "wrong bearer token" if self.problem is None else f"wrong bearer token ({self.problem})"
        if not match.active:
            return None, f"revoked bearer token (principal {match.name}, revoked {match.revoked})"
        return match.name, ""


__all__ = ["PrincipalTable", "Principal", "PrincipalsError", "add", "revoke", "read", "exposure", "new_token", "token_digest",
           "name_problem", "store_path", "principals_file", "NAME_RULE_TEXT", "PRINCIPALS_FILE"]
