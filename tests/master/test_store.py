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


def test_a_reopened_store_finds_each_jobs_latest_evaluation_in_its_history(tmp_path: Path):
    """Issue 40, item 3: a restarted master shows the test scores it showed before (the history
    holds them; the job's row does not repeat them)."""
    import math

    from coded.master.store import JobStore, Record, StoredJob

    store = JobStore(tmp_path)
    evaluated, never = (StoredJob(name, "gradient_coding", "{}", "RUNNING", 20, 0.0) for name in ("a", "b"))
    for job in (evaluated, never):
        store.create(job)
    store.commit(evaluated, [Record(8, 0.5, 1.0, 0.1, [0], test_loss=0.7, test_accuracy=0.6, test_auc=0.65),
                             Record(9, 0.4, 1.1, 0.1, [0], test_loss=0.6, test_accuracy=0.75),
                             Record(10, 0.3, 1.2, 0.1, [0])])
    store.commit(never, [Record(0, 0.5, 1.0, 0.1, [0])])
    store.close()
    loaded = {job.id: job for job in JobStore(tmp_path).load_all()}
    test = loaded["a"].test
    assert test is not None and (test.iteration, test.loss, test.accuracy) == (9, 0.6, 0.75) and math.isnan(test.auc)
    assert loaded["b"].test is None


def test_a_records_reply_times_survive_a_restart_and_an_older_state_dir_gets_the_column(tmp_path: Path):
    """Each responder's reply time (issue 56: the planner fits each worker from it) is kept with its
    record; a state dir of a master that did not keep it opens with the column added, empty."""
    from coded.master.store import JobStore, Record, StoredJob

    store = JobStore(tmp_path)
    job = StoredJob("a", "gradient_coding", "{}", "RUNNING", 20, 0.0)
    store.create(job)
    store.commit(job, [Record(0, 0.5, 1.0, 0.1, [0, 2], worker_compute=[0.25, 0.5], worker_transfer=[0.125, 0.25],
                              worker_reply=[0.5, 0.75])])
    store.close()
    assert JobStore(tmp_path).history("a")[0].worker_reply == [0.5, 0.75]
    with sqlite3.connect(tmp_path / "jobs.sqlite3") as db:  # as an older master left it: no reply column
        db.execute("ALTER TABLE history DROP COLUMN reply")
    assert JobStore(tmp_path).history("a")[0].worker_reply == []
