"""JSONL store: small file-system helpers (stats, opens that refuse links and FIFOs, durable writes).

What every part of :class:`~agentlog.persistence.jsonl.backend.JsonlBackend` uses to touch a file: the
revision string of a stat, existence checks that type their failures, regular-file opens, whole-file
reads, the refusals of a path that is not a regular file or not a directory, and the store's encoding
detection.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final, Literal

from ...errors import StorageAccessError
from ..paths import file_kind
from ..storage_errors import storage_error

LOGICAL_FILENAME: Final = "session.jsonl"
NO_CWD_DIR: Final = "_no-cwd"
LOCKS_DIR: Final = ".locks"

_SUFFIXES: Final = {"zstd": ".jsonl.zstd", "none": ".jsonl"}
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
_O_SAFE: Final = _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
"""Every log open: never through a symbolic link, never blocking on a FIFO (fstat then refuses it)."""


def _revision(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _exists(path: str) -> bool:
    """ENOENT means absent (and a name too long to exist); any other failure (ENOTDIR, EACCES) is a real
    storage fault and propagates."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            return False
        raise
    return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    done = 0
    while done < len(view):
        written = os.write(fd, view[done:])
        if written <= 0:
            raise OSError(5, "short write")
        done += written


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise storage_error(err, path) from err


def _same_file(path: str, other: str) -> bool:
    """Whether two paths resolve to the same file (symlinked project directories, case aliases)."""
    try:
        return os.path.realpath(path, strict=True) == os.path.realpath(other, strict=True)
    except OSError:
        return False


def _lexists(path: str) -> bool:
    """Like :func:`_exists`, without following a final symbolic link (a dangling link exists)."""
    try:
        os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _kind(mode: int) -> str:
    kind = file_kind(mode)
    return "not a regular file" if kind in ("regular file", "special file") else f"a {kind}"


_NOT_A_FILE_REMEDY: Final = (
    "a session log must be a regular file inside the store (not a directory, FIFO, device or symbolic link); "
    "move what is there out of the store. Nothing was read or written"
)


def _not_a_file(path: str, mode: int) -> StorageAccessError:
    return StorageAccessError(
        f'storage path "{path}" is {_kind(mode)}: {_NOT_A_FILE_REMEDY}', code="STORAGE_NOT_A_FILE", path=path
    )


def _not_a_directory(path: str, what: str, found: str) -> StorageAccessError:
    return StorageAccessError(
        f'{what} "{path}" is {found}, not a directory: agentlog reads and writes only real directories inside '
        "the store; move it away (or point the store elsewhere). Nothing was read or written",
        code="STORAGE_NOT_A_DIRECTORY",
        path=path,
    )


def _open_regular(path: str, flags: int) -> tuple[int, os.stat_result]:
    """Open ``path`` without following a symlink or blocking on a FIFO; refuse anything not a regular file."""
    fd = os.open(path, flags | _O_SAFE)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_a_file(path, st.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _read_fd(fd: int, size: int) -> bytes:
    """The whole content of a regular file opened at offset 0 (``size`` from its fstat, a hint)."""
    parts: list[bytes] = []
    want = max(size, 0) + 1
    while True:
        chunk = os.read(fd, want)
        if not chunk:
            return b"".join(parts) if len(parts) != 1 else parts[0]
        parts.append(chunk)
        want = 1 << 20


def detect_compression(root: str | os.PathLike[str]) -> Literal["zstd", "none"] | None:
    """The encoding of the logs in a store (from the first session file found), ``None`` if it holds none.

    Read-only: lists directories, opens nothing. A store mixing both encodings is reported by the
    backend itself (whichever encoding is detected, the other one's files are refused).
    """
    base = os.path.abspath(os.fspath(root))
    try:
        with os.scandir(base) as entries:
            projects = sorted(e.name for e in entries if e.name != LOCKS_DIR and e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return None
    for project in projects:
        try:
            with os.scandir(os.path.join(base, project)) as entries:
                sessions = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for session in sessions:
            session_dir = os.path.join(base, project, session)
            if _lexists(os.path.join(session_dir, "session" + _SUFFIXES["zstd"])):
                return "zstd"
            if _lexists(os.path.join(session_dir, "session" + _SUFFIXES["none"])):
                return "none"
    return None


class _FileChanged(Exception):
    """Internal: the file changed while a seek read it (a short read); the read starts over."""
