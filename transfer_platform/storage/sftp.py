"""SFTP (paramiko), for object storage's destination: objects as files under a folder of an SSH
server, and a model's lock as a file.

- An object is written aside (``.<name>.<random>.tmp``: a dot-name, which listings skip) and
  renamed into place with ``posix-rename@openssh.com`` (an atomic replace): a reader sees the old
  file or the new one, never a part.
- A model's lock is ``<books>/<model>/lock.json``, created exclusively (``SSH_FXF_CREAT |
  SSH_FXF_EXCL``: one of two creators wins) holding who holds it; renewed by each window (written
  aside and renamed over itself); taken over when its holder is gone (:func:`_stale`: as a lock
  object of ``storage/s3.py``) by renaming it away (a plain SFTP rename, which never replaces) and
  checking that what was moved is the stale lock that was read; deleted at release.
- The server is known by its public host key (``connection.known_host_key``): any other key, or
  a server without that key, is refused; nothing is ever accepted unseen.

Errors name the server, the folder and the reason, never the private key or password (read from
the environment variables the configuration names, and remembered for log redaction).
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import io
import json
import stat
import time
import uuid
from contextlib import suppress
from posixpath import dirname
from typing import TYPE_CHECKING

from paramiko import SSHException

from transfer_platform.config.connection_settings import SFTPConnection
from transfer_platform.errors import ConfigError, ConnectionFailure
from transfer_platform.storage.locks import Lock, holder_text, running, who_holds
from transfer_platform.storage.s3 import S3_LOCK_LEASE_SECONDS, LockedBucket, _expired

if TYPE_CHECKING:
    import paramiko

#: seconds to connect, to get the server's banner and to authenticate
CONNECT_TIMEOUT = 10
#: what an SFTP operation raises: the server's refusal, or a connection lost meanwhile
_FAILURES = (OSError, EOFError, SSHException)


class SFTPStore(LockedBucket):
    """Object storage's store (:class:`~transfer_platform.storage.stores.Store`) in a folder of an
    SFTP server. It has no file system for Spark's executors (``options`` is ``None`` and
    ``writes_here`` is true): the writer writes every file of a window through :meth:`put`."""

    options = None
    writes_here = True

    def __init__(self, c: SFTPConnection, owner: str) -> None:
        """``owner``: what the connection belongs to, as errors name it ("destination 'x'")."""
        self.c = c
        self.owner = owner
        self.root = str(c.path).rstrip("/") or "/"
        self.where = f"SFTP folder {self.root} on {c.host}:{c.port}"
        self.bucket_name = self.root
        self._ssh: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._folders: set[str] = set()  # folders known to exist

    # -- the connection ---------------------------------------------------------------------

    def _client(self) -> paramiko.SFTPClient:
        if self._sftp is not None and self._ssh is not None and self._ssh.get_transport() is not None \
                and self._ssh.get_transport().is_active():
            return self._sftp
        self._disconnect()
        self._ssh = self._connect()
        try:
            self._sftp = self._ssh.open_sftp()
            found = self._sftp.stat(self.root)
        except _FAILURES as exc:
            self._disconnect()
            if isinstance(exc, FileNotFoundError):
                raise ConnectionFailure(f"object storage {self.where}", reason="the folder does not exist",
                                        fix=f"create {self.root} on the server, owned by {self.c.username} "
                                            "(docs/permissions.md), or correct connection.path") from None
            raise self._failure("open", self.root, exc) from None
        if not stat.S_ISDIR(found.st_mode or 0):
            self._disconnect()
            raise ConnectionFailure(f"object storage {self.where}", reason=f"{self.root} is not a folder",
                                    fix="correct connection.path")
        return self._sftp

    def _connect(self) -> paramiko.SSHClient:
        import paramiko

        c, at = self.c, f"{self.owner}.connection"
        password = None if c.password is None else c.password.resolve(f"{at}.password").get_secret_value()
        key = _private_key(c.private_key.resolve(f"{at}.private_key").get_secret_value(), password,
                           f"{at}.private_key ({c.private_key})")
        ssh = paramiko.SSHClient()
        ssh.set_missing_host_key_policy(paramiko.RejectPolicy())  # only known_host_key is accepted
        host_key = _host_key(c.known_host_key, f"{at}.known_host_key")
        ssh.get_host_keys().add(c.host if c.port == 22 else f"[{c.host}]:{c.port}", host_key.get_name(), host_key)
        server = f"{c.host}:{c.port}"
        try:
            ssh.connect(c.host, c.port, username=c.username, pkey=key, password=password, look_for_keys=False,
                        allow_agent=False, timeout=CONNECT_TIMEOUT, banner_timeout=CONNECT_TIMEOUT,
                        auth_timeout=CONNECT_TIMEOUT)
        except paramiko.BadHostKeyException:
            ssh.close()
            raise self._refused(f"the server {server} presented a host key other than connection.known_host_key "
                                "(it may not be the server you mean)",
                                "check the server's key with its administrator; if it was changed on purpose, "
                                "set connection.known_host_key to the new public key") from None
        except paramiko.AuthenticationException:
            ssh.close()
            raise self._refused(f"the server {server} refused user {c.username}'s key",
                                f"correct the key ({at}.private_key's variable), or add its public key to "
                                f"{c.username}'s authorized_keys on the server") from None
        except paramiko.SSHException as exc:
            ssh.close()
            if "known_hosts" in str(exc):  # RejectPolicy: the server has no key of the known one's type
                raise self._refused(f"the server {server} has no host key of type {host_key.get_name()} "
                                    "(connection.known_host_key's)",
                                    "set connection.known_host_key to one of the server's public host keys "
                                    "(ssh-keyscan, checked with its administrator)") from None
            raise self._refused(f"SSH failed: {_line(exc)}", "check connection.host and port (an SSH server "
                                "with the SFTP subsystem)") from None
        except (OSError, EOFError) as exc:
            ssh.close()
            raise self._refused(f"{server} cannot be reached ({type(exc).__name__}: {_line(exc)})",
                                "check connection.host and port, and that the server is running") from None
        return ssh

    def _refused(self, reason: str, fix: str) -> ConnectionFailure:
        return ConnectionFailure(f"object storage {self.where}", reason=reason, fix=fix)

    def _disconnect(self) -> None:
        for part in (self._sftp, self._ssh):
            if part is not None:
                with suppress(Exception):
                    part.close()
        self._sftp = self._ssh = None
        self._folders.clear()

    def _path(self, key: str) -> str:
        return f"{self.root.rstrip('/')}/{key}"

    # -- objects ------------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> str:
        """Written aside, then renamed into place (an atomic replace); returns its MD5 (a
        single-part S3 upload's ETag)."""
        self._replace(key, data)
        return hashlib.md5(data, usedforsecurity=False).hexdigest()

    def _replace(self, key: str, data: bytes) -> None:
        sftp, path = self._client(), self._path(key)
        self._make_folders(dirname(path))
        aside = f"{dirname(path)}/.{path.rsplit('/', 1)[-1]}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            try:
                sftp.putfo(io.BytesIO(data), aside, file_size=len(data))
            except _FAILURES as exc:
                raise self._failure("create", aside, exc) from None
            try:
                sftp.posix_rename(aside, path)
            except _FAILURES as exc:
                raise self._failure("rename into place", path, exc) from None
        except BaseException:
            with suppress(Exception):
                sftp.remove(aside)
            raise

    def get(self, key: str) -> bytes | None:
        data = io.BytesIO()
        try:
            self._client().getfo(self._path(key), data)
        except FileNotFoundError:
            return None
        except _FAILURES as exc:
            raise self._failure("read", self._path(key), exc) from None
        return data.getvalue()

    def keys(self, prefix: str) -> list[str]:
        """Every file under the folder-like ``prefix`` (dot-names, files being written, left out;
        a killed transfer's are removed: :meth:`_remove_if_dead`)."""
        sftp = self._client()
        found, folders = [], [prefix.rsplit("/", 1)[0] if "/" in prefix else ""]
        while folders:
            folder = folders.pop()
            try:
                entries = sftp.listdir_attr(self._path(folder) if folder else self.root)
            except FileNotFoundError:
                continue
            except _FAILURES as exc:
                raise self._failure("list", folder or "/", exc) from None
            for entry in entries:
                if entry.filename.startswith("."):
                    self._remove_if_dead(folder, entry)
                    continue
                key = f"{folder}/{entry.filename}" if folder else entry.filename
                if stat.S_ISDIR(entry.st_mode or 0):
                    folders.append(key)
                elif key.startswith(prefix):
                    found.append(key)
        return sorted(found)

    def _remove_if_dead(self, folder: str, entry: paramiko.SFTPAttributes) -> None:
        """A file written aside (``.<name>.<random>.tmp``) is renamed into place within seconds;
        one older than the lock's lease is a killed transfer's, and so is a data file's
        (``.part-...``) at any age: a model's data folders are listed only by its next transfer,
        under the model's lock, looking for a dead transfer's files. Removed where it is listed."""
        name = entry.filename
        if name.endswith(".tmp") and (name.startswith(".part-")
                                      or time.time() - (entry.st_mtime or 0) > S3_LOCK_LEASE_SECONDS):
            with suppress(OSError):
                self._client().remove(self._path(f"{folder}/{name}" if folder else name))

    def delete(self, keys: list[str]) -> None:
        sftp = self._client() if keys else None
        for key in keys:
            try:
                sftp.remove(self._path(key))
            except FileNotFoundError:
                pass
            except _FAILURES as exc:
                raise self._failure("delete", self._path(key), exc) from None

    def etag(self, key: str, md5: str) -> str:
        """A file written whole: its MD5, as a single-part S3 upload's ETag."""
        return md5

    def location(self, key: str) -> str:
        """``key`` as a URL (for messages: no file system of pyarrow's reads it)."""
        return f"sftp://{self.c.username}@{self.c.host}:{self.c.port}{self._path(key)}"

    def _make_folders(self, folder: str) -> None:
        if folder in self._folders or folder.rstrip("/") in ("", self.root.rstrip("/")):
            return
        sftp = self._client()
        try:
            sftp.stat(folder)
        except FileNotFoundError:
            self._make_folders(dirname(folder))
            try:
                sftp.mkdir(folder)
            except _FAILURES as exc:
                try:  # made meanwhile by another transfer (a folder that exists fails as "Failure")
                    sftp.stat(folder)
                except OSError:
                    raise self._failure("create folder", folder, exc) from None
        except _FAILURES as exc:
            raise self._failure("create folder", folder, exc) from None
        self._folders.add(folder)

    def _failure(self, what: str, key: str, exc: Exception) -> ConnectionFailure:
        """``what`` (a step: create, rename into place, delete, ...) of ``key`` failed: the step
        is named in the reason, which ``test-connection`` shows."""
        denied = isinstance(exc, PermissionError) or getattr(exc, "errno", None) == errno.EACCES
        detail = "permission denied" if denied else f"{type(exc).__name__}: {_line(exc)}"
        fix = (f"let user {self.c.username} create, rename and delete files and folders in {self.root} "
               "(docs/permissions.md), or correct connection.path") if denied else \
            f"check that {key} can be written in {self.root} (no file where a folder goes) and the server runs"
        return ConnectionFailure(f"object storage {self.where}", reason=f"cannot {what} {key}: {detail}", fix=fix)

    # -- a model's lock ---------------------------------------------------------------------

    def model_lock(self, model: str, key: str, transfer_id: str, destination: str) -> CreatedFileLock:
        return CreatedFileLock(self, model, key, transfer_id, destination)

    def release_all(self) -> None:
        """Delete the locks held (each only if it is still this one's), and close the connection."""
        super().release_all()
        self._disconnect()

    def _create_exclusively(self, key: str, text: bytes) -> bool:
        """Create the lock file holding ``text``; False if it exists (another holds it)."""
        sftp, path = self._client(), self._path(key)
        self._make_folders(dirname(path))
        try:
            file = sftp.open(path, "wbx")  # SSH_FXF_CREAT | SSH_FXF_EXCL: fails if the file exists
        except _FAILURES as exc:
            with suppress(FileNotFoundError):
                sftp.stat(path)
                return False  # OpenSSH says "Failure" for EEXIST: the file is there
            raise self._failure("create lock", key, exc) from None
        try:
            with file:
                file.write(text)
        except _FAILURES as exc:
            with suppress(Exception):
                sftp.remove(path)
            raise self._failure("write lock", key, exc) from None
        return True

    def _lock_file(self, key: str) -> tuple[bytes | None, float]:
        """The lock file's text and age in seconds (by its modification time), or None."""
        try:
            found = self._client().stat(self._path(key))
        except FileNotFoundError:
            return None, 0.0
        except _FAILURES as exc:
            raise self._failure("read lock", key, exc) from None
        held = self.get(key)
        return held, time.time() - (found.st_mtime or 0)

    def _take_over(self, key: str, held: bytes) -> None:
        """Move a stale lock away (a plain SFTP rename: it never replaces), then check that what
        moved is what was read as stale; a lock created meanwhile is put back."""
        sftp, path = self._client(), self._path(key)
        aside = f"{dirname(path)}/.lock.{uuid.uuid4().hex[:8]}.stale"
        try:
            sftp.rename(path, aside)
        except OSError:
            return  # someone else moved it first: look again
        moved = io.BytesIO()
        with suppress(OSError):
            sftp.getfo(aside, moved)
        if moved.getvalue() != held:
            with suppress(OSError):
                sftp.rename(aside, path)  # put back (fails if a new lock was made meanwhile)
        with suppress(OSError):
            sftp.remove(aside)


class CreatedFileLock(Lock):
    """A model's lock as the file ``key`` of an :class:`SFTPStore`, created exclusively holding who
    holds it; renewed (written aside, renamed over itself) and deleted only while it is still
    this one's; taken over when its holder is gone (:func:`_stale`)."""

    def __init__(self, store: SFTPStore, model: str, key: str, transfer_id: str, destination: str) -> None:
        self.store, self.model, self.key = store, model, key
        self.transfer_id, self.destination = transfer_id, destination
        self._text = b""  # what the file holds while it is ours
        self._held: bytes | None = None  # another holder's, as last read

    def take(self, within: float) -> bool:
        text = holder_text(self.transfer_id).encode()
        if not self.store._create_exclusively(self.key, text):
            return False
        self._text = text
        return True

    def take_over(self) -> bool:
        """Released meanwhile, or a stale lock moved away: True."""
        self._held, age = self.store._lock_file(self.key)
        if self._held is not None and _stale(self._held, age):
            self.store._take_over(self.key, self._held)
            return True
        return self._held is None

    def holder(self) -> str:
        return who_holds((self._held or b"").decode(errors="replace"))

    def renew(self) -> None:
        held = self.store.get(self.key)
        if held != self._text:
            raise running(self.model, self.destination, who_holds((held or b"").decode(errors="replace")))
        text = holder_text(self.transfer_id).encode()
        self.store._replace(self.key, text)
        self._text = text

    def release(self) -> None:
        if self.store.get(self.key) == self._text:
            self.store._client().remove(self.store._path(self.key))


def _stale(held: bytes, age_seconds: float) -> bool:
    """A lock whose transfer is gone: as a lock object's (:func:`~transfer_platform.storage.s3._expired`);
    a lock file not yet written (its creator writes it at once) only once older than the lease."""
    try:
        json.loads(held)
    except ValueError:
        return age_seconds > S3_LOCK_LEASE_SECONDS
    return _expired(held)


def _private_key(text: str, passphrase: str | None, where: str) -> paramiko.PKey:
    """The private key in ``text`` (OpenSSH or PEM: Ed25519, ECDSA or RSA); errors never show it."""
    import paramiko

    for kind in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return kind.from_private_key(io.StringIO(text.strip() + "\n"), password=passphrase)
        except paramiko.PasswordRequiredException:
            raise ConfigError(f"{where}: the private key is encrypted; set connection.password to a variable "
                              "holding its passphrase") from None
        except (paramiko.SSHException, ValueError, TypeError, IndexError, binascii.Error):
            continue
    raise ConfigError(f"{where}: the variable does not hold a private key (OpenSSH or PEM text of an Ed25519, "
                      "ECDSA or RSA key), or its passphrase (connection.password) is wrong")


def _host_key(line: str, where: str) -> paramiko.PKey:
    import paramiko
    from paramiko.pkey import UnknownKeyType

    kind, blob = line.split()[:2]
    try:
        return paramiko.PKey.from_type_string(kind, base64.b64decode(blob))
    except (paramiko.SSHException, ValueError, binascii.Error, UnknownKeyType):
        raise ConfigError(f"{where}: not a public host key of a type paramiko reads ({kind}); it must be one "
                          "line as ssh-keyscan prints it, without the host: 'ssh-ed25519 AAAA...'") from None


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
