"""Checkpoint signing keys on disk: Ed25519 private keys in the Go ``sumdb/note`` format.

A key file holds one UTF-8 line, ``PRIVATE+KEY+<name>+<hex8 key ID>+<base64(0x01 || seed)>``
(see :mod:`evidence_ledger.tlog.note`), mode 0600. The key name is the checkpoint origin.
Beside it, :func:`keygen` writes its verifier key file (:func:`verifier_key_path`): one
line, ``<name>+<hex8 key ID>+<base64(0x01 || public key)>``, to hand to whoever verifies.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from evidence_ledger.format.errors import StorageError, UsageError
from evidence_ledger.storage.fsutil import close_fd
from evidence_ledger.storage.log_store import LOG_NAME
from evidence_ledger.tlog.note import KeyFormatError, Signer, is_valid_name

__all__ = [
    "KEY_FILE_MODE", "VERIFIER_KEY_FILE_MODE", "check_new_key_path", "check_origin", "keygen",
    "load_signer", "refuse_key_inside", "verifier_key_path",
]

KEY_FILE_MODE = 0o600
VERIFIER_KEY_FILE_MODE = 0o644
"""Mode a verifier key file is created with, less the umask (it is public)."""
MAX_KEY_FILE = 4096


def _ledger_above(path: Path) -> Path | None:
    """The nearest directory at or above ``path``'s parent that holds a ledger log."""
    for directory in [path.parent, *path.parent.parents]:
        if (directory / LOG_NAME).is_file():
            return directory
    return None


def check_origin(origin: str) -> None:
    """Refuse a key name ``keygen`` would not write.

    A C2SP signed-note key name is non-empty UTF-8 without Unicode spaces or ``+``; a
    new key's name must also be printable (no control or format characters, no lone
    surrogates from undecodable command-line bytes).

    Raises:
        UsageError: if ``origin`` is not such a name.
    """
    if not (is_valid_name(origin) and origin.isprintable()):
        raise UsageError(
            f"invalid origin {origin!r}: a key name is printable, non-empty, without "
            "spaces or '+'"
        )


def verifier_key_path(key_path: str | os.PathLike[str]) -> Path:
    """Where :func:`keygen` writes the verifier key of the private key file ``key_path``:
    beside it, its name with a final ``.key`` replaced by ``.vkey`` (``ledger.key`` ->
    ``ledger.vkey``), else with ``.vkey`` added (``ledger`` -> ``ledger.vkey``). Never
    ``key_path`` itself."""
    path = Path(key_path)
    name = path.name
    stem = name[: -len(".key")] if name.endswith(".key") and name != ".key" else name
    return path.with_name(stem + ".vkey")


def check_new_key_path(path: str | os.PathLike[str]) -> None:
    """Refuse ``path`` for a new private key file (and its verifier key file beside it).

    Raises:
        UsageError: if either exists, or the key lies inside a ledger directory (whoever
            copies the ledger would get the key).
    """
    target = Path(path)
    if os.path.lexists(target):
        raise UsageError(f"{target} already exists; refusing to overwrite a key")
    public = verifier_key_path(target)
    if os.path.lexists(public):
        raise UsageError(f"{public} already exists; refusing to overwrite a verifier key")
    ledger_dir = _ledger_above(target.absolute())
    if ledger_dir is not None:
        raise UsageError(
            f"refusing to write a private key inside the ledger directory {ledger_dir}"
        )


def keygen(origin: str, out_path: str | os.PathLike[str]) -> str:
    """Create a new Ed25519 key named ``origin``; write the private key to ``out_path`` and
    its verifier key beside it (:func:`verifier_key_path`).

    Both files are new (never overwritten): the private key with mode 0600, the verifier
    key with 0644 less the umask, each one line ending in a newline and synced. A failed
    write removes both, so no partial key and no verifier key without its key is ever left.

    Args:
        origin: key name and checkpoint origin, e.g. ``example.com/ledger`` (see
            :func:`check_origin`).
        out_path: where to write the private key string (a new file, UTF-8).

    Returns:
        The verifier key string ``name+hex8(keyid)+base64(0x01 || public key)``.

    Raises:
        UsageError: if the origin is not a valid key name, either file exists, or the
            path lies inside a ledger directory.
        StorageError: if a file cannot be written.
    """
    check_origin(origin)
    path = Path(out_path)
    check_new_key_path(path)
    signer = Signer.generate(origin)
    data = (signer.skey + "\n").encode("utf-8")
    if len(data) > MAX_KEY_FILE:  # load_signer would refuse it
        raise UsageError(
            f"origin is {len(origin.encode('utf-8'))} bytes long; a key file holds at most "
            f"{MAX_KEY_FILE} bytes"
        )
    vkey = signer.verifier.vkey
    _write_new(path, data, private=True)
    try:
        _write_new(verifier_key_path(path), (vkey + "\n").encode("utf-8"), private=False)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return vkey


def _write_new(path: Path, data: bytes, *, private: bool) -> None:
    """Create ``path`` (never an existing file) with ``data``, synced: a private key
    (mode 0600 whatever the umask) or a verifier key (0644 less the umask). A failed write
    removes the file.

    Raises:
        UsageError: if it exists or its directory does not.
        StorageError: if it cannot be created or written.
    """
    mode = KEY_FILE_MODE if private else VERIFIER_KEY_FILE_MODE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError as exc:
        what = "a key" if private else "a verifier key"
        raise UsageError(f"{path} already exists; refusing to overwrite {what}") from exc
    except FileNotFoundError as exc:
        raise UsageError(f"cannot create {path}: no such directory") from exc
    except OSError as exc:
        raise StorageError(f"cannot create {path}: {exc.strerror}") from exc
    written = False
    try:
        with os.fdopen(fd, "wb") as fh:
            if private:
                os.fchmod(fh.fileno(), KEY_FILE_MODE)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        written = True
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        if not written:
            with contextlib.suppress(OSError):
                os.unlink(path)


PRIVATE_PREFIX = b"PRIVATE+KEY+"
"""How a private key file starts (c2sp.org/signed-note, Go ``note.NewSigner``)."""


def load_signer(path: str | os.PathLike[str]) -> Signer:
    """Load a private key written by :func:`keygen` (or Go ``note.GenerateKey``).

    Refuses a file that is not a regular file, or that the group or others may read or
    write (mode & 0o077), like ssh does.

    Raises:
        UsageError: (:class:`~evidence_ledger.tlog.note.KeyFormatError` for a malformed key) if the
            file is missing, of the wrong type, too open, or not a private key.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise UsageError(f"key file {path} not found") from exc
    except OSError as exc:
        raise UsageError(f"cannot open key file {path}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"key file {path} is not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if st.st_size > MAX_KEY_FILE:
            raise UsageError(f"key file {path} is {st.st_size} bytes; not a private key")
        raw = os.read(fd, MAX_KEY_FILE + 1)
        if mode & 0o077 and not raw.startswith(PRIVATE_PREFIX):  # e.g. the .vkey beside it
            raise UsageError(f"{path} is not a private key file (a private key starts with "
                             f"{PRIVATE_PREFIX.decode()}; a verifier key is public)")
        if mode & 0o077:
            raise UsageError(
                f"key file {path} has mode {mode:04o}, readable by others; run chmod 600 {path}"
            )
    except OSError as exc:
        raise UsageError(f"cannot read key file {path}: {exc.strerror}") from exc
    finally:
        close_fd(fd)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KeyFormatError(f"key file {path} is not a private key (not UTF-8)") from exc
    if text.endswith("\n"):
        text = text[:-1]
    try:
        return Signer.from_skey(text)
    except KeyFormatError as exc:
        raise KeyFormatError(f"key file {path}: {exc}") from exc


def refuse_key_inside(ledger_dir: str | os.PathLike[str], key_path: str | os.PathLike[str]) -> None:
    """Refuse a private key file kept inside the ledger directory it signs for.

    Raises:
        UsageError: if ``key_path`` resolves to a path inside ``ledger_dir``.
    """
    ledger_root, key = Path(ledger_dir).resolve(), Path(key_path).resolve()
    if key == ledger_root or ledger_root in key.parents:
        raise UsageError(
            f"refusing the private key {key_path}: it is inside the ledger directory "
            f"{ledger_dir}; keep keys outside it"
        )
