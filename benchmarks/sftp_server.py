"""A real SFTP server for the SFTP benchmark and the tests (``transfer_platform_tests/support/sftp_server.py``):
Debian's OpenSSH ``/usr/sbin/sshd`` (openssh-server, installed by ``scripts/dev setup``) started as
its own process on 127.0.0.1 with a configuration file, host key and client key of its own (made
with ``ssh-keygen`` in a temporary folder), stopped afterwards. Nothing patches paramiko: clients
speak SSH to this process.

Who logs in: the user the tests run as, ``root`` (CI's), with its key only
(``PermitRootLogin prohibit-password``), confined as docs/permissions.md confines a transfers'
user: ``ForceCommand internal-sftp`` (no shell, no forwarding) and ``ChrootDirectory``. sshd
requires the chroot and every folder above it to be root's and writable by no one else, so it is
made under ``/run`` (not ``/tmp``, which everyone may write); inside it ``upload/`` is the folder
transfers write under, as the user sees it ``/upload``. No system user is created. As another
user sshd cannot chroot: the tests that need it are skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.spark_server import free_port, listening, stop, wait_for

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = "ssh-keygen"
NEEDS_ROOT = "sshd with ChrootDirectory (as these tests and benchmarks run it) needs root"
#: the folder transfers write under, as the chrooted user sees it
UPLOAD = "/upload"


@dataclass(frozen=True)
class SFTPServer:
    port: int
    user: str
    private_key: str  # the client's key (OpenSSH text): what connection.private_key's variable holds
    host_key: str  # the server's public host key line ("ssh-ed25519 AAAA..."): connection.known_host_key
    chroot: Path  # the chroot on this machine
    log: Path
    host: str = "127.0.0.1"

    def folder(self) -> str:
        """A new, empty folder under ``/upload`` (as the user sees it)."""
        name = f"it-{uuid.uuid4().hex[:12]}"
        (self.chroot / UPLOAD.strip("/") / name).mkdir()
        return f"{UPLOAD}/{name}"

    def connection(self, path: str, key_env: str, /, **changes: object) -> dict:
        """A destination's ``connection`` block for ``path`` (the key read from ``key_env``)."""
        return {"host": self.host, "port": self.port, "username": self.user, "private_key": f"${{{key_env}}}",
                "known_host_key": self.host_key, "path": path} | changes

    @contextmanager
    def sftp(self) -> Iterator:
        """A paramiko SFTP client of the user (the recipient's own reading), the host key checked."""
        import base64
        import io

        import paramiko

        ssh = paramiko.SSHClient()
        ssh.set_missing_host_key_policy(paramiko.RejectPolicy())
        kind, blob = self.host_key.split()[:2]
        key = paramiko.PKey.from_type_string(kind, base64.b64decode(blob))
        ssh.get_host_keys().add(f"[{self.host}]:{self.port}", key.get_name(), key)
        ssh.connect(self.host, self.port, username=self.user, look_for_keys=False, allow_agent=False,
                    pkey=paramiko.Ed25519Key.from_private_key(io.StringIO(self.private_key)), timeout=10)
        try:
            with ssh.open_sftp() as client:
                yield client
        finally:
            ssh.close()


def _config(folder: Path, port: int, chroot: Path, user: str) -> Path:
    path = folder / "sshd_config"
    path.write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {folder}/host_ed25519
PidFile {folder}/sshd.pid
AuthorizedKeysFile {folder}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
LogLevel VERBOSE
Subsystem sftp internal-sftp
AllowUsers {user}
Match User {user}
    ChrootDirectory {chroot}
    ForceCommand internal-sftp
    AllowTcpForwarding no
    X11Forwarding no
    PermitTTY no
""")
    return path


def keygen(path: Path) -> tuple[str, str]:
    """A new Ed25519 key pair at ``path``: (private key text, public key line without comment)."""
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)], check=True)
    return path.read_text(), " ".join(Path(f"{path}.pub").read_text().split()[:2])


@contextmanager
def sftp_server(folder: Path) -> Iterator[SFTPServer]:
    """sshd on a free loopback port, yielded once it accepts connections, stopped afterwards."""
    if os.geteuid() != 0:
        raise PermissionError(NEEDS_ROOT)
    user = "root"
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder (as its service makes)
    chroot = Path(tempfile.mkdtemp(prefix="tp-sftp-", dir="/run"))  # root's, 0700: as sshd requires
    (chroot / UPLOAD.strip("/")).mkdir(mode=0o755)
    try:
        _, host_key = keygen(folder / "host_ed25519")
        private_key, client_public = keygen(folder / "client_ed25519")
        (folder / "authorized_keys").write_text(client_public + "\n")
        port = free_port()
        config = _config(folder, port, chroot, user)
        log = folder / "sshd.log"
        with log.open("w") as out:
            process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(process, log, "sshd", lambda: listening(port))
            yield SFTPServer(port, user, private_key, host_key, chroot, log)
        finally:
            stop(process)
    finally:
        shutil.rmtree(chroot, ignore_errors=True)
