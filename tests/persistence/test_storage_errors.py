"""An operating system's refusal becomes one typed error whichever file-backed part of persistence hit it.

Real refusals from real system calls (a directory made over a file, a file opened under a file, a directory
opened for writing): the code, the errno's name and the remedy come from one table, the message from one
builder, so a JSONL log, a SQLite database and the projection cache beside them report one condition alike.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from agentlog.errors import StorageAccessError
from agentlog.persistence import storage_errors
from agentlog.persistence.storage_errors import OS_ERROR_KINDS, storage_error


def _refusals(tmp_path: Path) -> list[tuple[OSError, str]]:
    file = tmp_path / "file"
    file.write_text("")
    found: list[tuple[OSError, str]] = []
    with pytest.raises(OSError) as over_a_file:
        os.mkdir(file)
    found.append((over_a_file.value, "STORAGE_NOT_A_DIRECTORY"))
    with pytest.raises(OSError) as under_a_file:
        os.open(file / "log.jsonl", os.O_CREAT | os.O_WRONLY)
    found.append((under_a_file.value, "STORAGE_NOT_A_DIRECTORY"))
    with pytest.raises(OSError) as a_directory:
        os.open(tmp_path, os.O_WRONLY)
    found.append((a_directory.value, "STORAGE_NOT_A_FILE"))
    return found


def test_an_os_refusal_has_one_code_and_remedy_with_or_without_an_action(tmp_path: Path) -> None:
    for err, code in _refusals(tmp_path):
        assert err.errno is not None
        name = errno.errorcode[err.errno]
        plain = storage_error(err)
        assert isinstance(plain, StorageAccessError)
        assert (plain.code, plain.path) == (code, os.fsdecode(err.filename))
        remedy = OS_ERROR_KINDS[err.errno][1]
        assert plain.message == f'storage error at "{plain.path}": {name}: {err.strerror} — {remedy}'
        acted = storage_error(err, "/elsewhere/cache.sqlite", "open the session projection cache")
        assert (acted.code, acted.path) == (code, "/elsewhere/cache.sqlite")
        assert acted.message == (
            f'cannot open the session projection cache: "/elsewhere/cache.sqlite": {name}: {err.strerror} — {remedy}'
        )


def test_the_errno_table_is_the_union_of_what_the_backends_mapped() -> None:
    kinds = {number: code for number, (code, _) in OS_ERROR_KINDS.items()}
    assert kinds[errno.ENOSPC] == kinds[errno.EDQUOT] == "STORAGE_FULL"
    assert kinds[errno.EEXIST] == kinds[errno.ENOTDIR] == "STORAGE_NOT_A_DIRECTORY"
    assert kinds[errno.EACCES] == kinds[errno.EPERM] == "STORAGE_PERMISSION_DENIED"
    assert kinds[errno.EROFS] == "STORAGE_READ_ONLY"
    assert kinds[errno.EISDIR] == kinds[errno.ELOOP] == kinds[errno.ENXIO] == "STORAGE_NOT_A_FILE"
    assert kinds[errno.ENAMETOOLONG] == "STORAGE_IO"
    unknown = storage_error(OSError(errno.EIO, "Input/output error", "/x"))
    assert unknown.code == "STORAGE_IO" and "check the device" in unknown.message


def test_every_file_backed_part_uses_the_one_builder() -> None:
    from agentlog.cli import projection_commands
    from agentlog.persistence.jsonl import backend as jsonl
    from agentlog.persistence.sqlite import _errors as sqlite
    from agentlog.projection import cache_storage

    for module in (jsonl, sqlite, cache_storage, projection_commands):
        assert vars(module)["storage_error"] is storage_errors.storage_error, module.__name__
