"""The state dir's refusals: one kind of error and the same words, whichever write met them."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from coded.base.errors import StorageError, StorageFull
from coded.master.store import _writing


@pytest.mark.parametrize("refusal", [OSError(errno.ENOSPC, "No space left on device"),
                                     OSError(errno.EDQUOT, "Disk quota exceeded"),
                                     sqlite3.OperationalError("database or disk is full")])
def test_a_full_state_dir_reads_the_same_from_a_file_write_and_from_sqlite(refusal):
    with pytest.raises(StorageFull) as caught, _writing(Path("/state"), "iterations 3-9 of job j"):
        raise refusal
    assert str(caught.value).startswith("cannot write iterations 3-9 of job j: the state dir /state is full (")


@pytest.mark.parametrize("refusal", [OSError(errno.EROFS, "Read-only file system"),
                                     sqlite3.OperationalError("attempt to write a readonly database")])
def test_another_refusal_names_the_state_dir_and_its_reason(refusal):
    with pytest.raises(StorageError) as caught, _writing(Path("/state"), "job j"):
        raise refusal
    assert type(caught.value) is StorageError
    assert str(caught.value) == f"cannot write job j to the state dir /state: {refusal.args[-1]}"
