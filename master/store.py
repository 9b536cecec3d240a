"""Durable job state: SQLite for jobs and their history, files for checkpoints and uploads.

Everything lives under the master's ``--state-dir``, so a restarted master finds its jobs again.
Writes of files are atomic (write to a temporary file, fsync, rename) and SQLite writes are
transactions, so a write the disk refuses (full, read-only) leaves the previous state intact; it
raises :class:`StorageError` (or :class:`StorageFull`) naming the state dir and the reason.
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import shutil
import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coded.base.errors import NotFound, StorageError, StorageFull

__all__ = ["Checkpoint", "Evaluation", "JobStore", "Record", "StoredJob"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
    iteration INTEGER NOT NULL DEFAULT 0, iterations INTEGER NOT NULL, elapsed REAL NOT NULL DEFAULT 0,
    loss REAL, reason TEXT NOT NULL DEFAULT '', created REAL NOT NULL, workers TEXT NOT NULL DEFAULT '[]',
    stats TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS history (
    job_id TEXT NOT NULL, iteration INTEGER NOT NULL, loss REAL, elapsed REAL, duration REAL,
    responders TEXT, test_loss REAL, test_accuracy REAL, test_auc REAL, compute TEXT,
    PRIMARY KEY (job_id, iteration)
);
"""
#: Columns added since the first schema: a state dir written by an older master gets them (with
#: these defaults) when a newer one opens it.
ADDED_COLUMNS = {
    "jobs": {"checks": "TEXT NOT NULL DEFAULT '{}'"},
    "history": {"checked": "INTEGER NOT NULL DEFAULT 0", "detected": "INTEGER NOT NULL DEFAULT 0",
                "corrected": "INTEGER NOT NULL DEFAULT 0", "located": "TEXT NOT NULL DEFAULT '[]'",
                "quarantined": "TEXT NOT NULL DEFAULT '[]'", "pieces": "TEXT NOT NULL DEFAULT '{}'",
                "stopped_pieces": "INTEGER NOT NULL DEFAULT 0", "transfer": "TEXT NOT NULL DEFAULT '[]'",
                "reply": "TEXT NOT NULL DEFAULT '[]'"},
}
HISTORY_COLUMNS = ("job_id, iteration, loss, elapsed, duration, responders, test_loss, test_accuracy, test_auc, "
                   "compute, checked, detected, corrected, located, quarantined, pieces, stopped_pieces, transfer, "
                   "reply")


@dataclass
class Record:
    """One finished iteration."""

    iteration: int
    loss: float
    elapsed: float
    duration: float
    responders: list[int]
    test_loss: float = math.nan
    test_accuracy: float = math.nan
    test_auc: float = math.nan
    worker_compute: list[float] = field(default_factory=list)
    checked: bool = False          # the result was confirmed by a surplus of replies
    detected: int = 0              # wrong replies detected
    corrected: int = 0             # ... of which the result was decoded without
    located: list[int] = field(default_factory=list)      # positions whose replies were located as wrong
    quarantined: list[int] = field(default_factory=list)  # positions taken out of the job after it
    #: streamed replies: the pieces used from each position, and how many of them came from
    #: workers that were stopped before they had sent all pieces of their own partition
    pieces: dict[int, list[int]] = field(default_factory=dict)
    stopped_pieces: int = 0
    #: seconds each responder's reply took to arrive once under way (its trip over the link)
    worker_transfer: list[float] = field(default_factory=list)
    #: seconds from the iteration's start (before its calls went out) until each responder's reply
    #: had arrived: the parameters' trip out, its computing and its reply's trip back
    worker_reply: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Evaluation:
    """A job's scores on its test split at one iteration (NaN where not defined for the model):
    what the latest record that has any holds."""

    iteration: int
    loss: float = math.nan
    accuracy: float = math.nan
    auc: float = math.nan

    @classmethod
    def of(cls, record: Record) -> Evaluation | None:
        """The record's scores; None when it was not evaluated."""
        scores = (record.test_loss, record.test_accuracy, record.test_auc)
        return None if all(math.isnan(v) for v in scores) else cls(record.iteration, *scores)


@dataclass
class StoredJob:
    id: str
    kind: str
    spec: str
    state: str
    iterations: int
    created: float
    iteration: int = 0
    elapsed: float = 0.0
    loss: float = math.nan
    reason: str = ""
    workers: list[str] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    #: what the job checks and what it found: {"verification": {...}, "located": {position: count},
    #: "quarantined": {position: iteration}} (keys are strings, as JSON has them)
    checks: dict[str, Any] = field(default_factory=dict)
    #: the latest evaluation (not a column: the history holds it, and loading finds it there)
    test: Evaluation | None = None


@dataclass
class Checkpoint:
    iteration: int
    params: np.ndarray
    optimizer: dict[str, np.ndarray | float | int]  # Optimizer.state_dict()


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _sql(value: float) -> float | None:
    return None if math.isnan(value) else value


FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


@contextmanager
def _writing(root: Path, what: str) -> Iterator[None]:
    """Turn a refused write into a StorageError that names the state dir and the reason; a full
    one says so in the same words whichever write found it (SQLite's, or a file's)."""
    try:
        yield
        return
    except sqlite3.OperationalError as error:  # SQLite reports the disk in words, not errno
        reason, full = str(error), "full" in str(error)
    except OSError as error:
        reason, full = error.strerror or str(error), error.errno in FULL_ERRNOS
    if full:
        raise StorageFull(f"cannot write {what}: the state dir {root} is full ({reason})") from None
    raise StorageError(f"cannot write {what} to the state dir {root}: {reason}") from None


class JobStore:
    """Jobs, history, checkpoints, uploaded files and results under one directory."""

    def __init__(self, state_dir: Path) -> None:
        self.root = Path(state_dir)
        with _writing(self.root, "the job database"):  # a read-only state dir stops the master here
            self.root.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.root / "jobs.sqlite3", isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # a commit survives the master being killed; only a power loss could drop the last few
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            for table, columns in ADDED_COLUMNS.items():
                have = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
                for name, declaration in columns.items():
                    if name not in have:
                        self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")

        # a submission that a killed master was still receiving: never a job's, since a job's
        # files are moved out of its staging dir before its row is written
        shutil.rmtree(self.root / "uploads", ignore_errors=True)

    def close(self) -> None:
        self._db.close()

    def job_dir(self, job_id: str) -> Path:
        return self.root / "jobs" / job_id

    # --- jobs --------------------------------------------------------------------------------------

    def create(self, job: StoredJob) -> None:
        with _writing(self.root, f"job {job.id}"):
            self.job_dir(job.id).mkdir(parents=True, exist_ok=True)
            self._db.execute(
                "INSERT INTO jobs (id, kind, spec, state, iterations, created, checks) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job.id, job.kind, job.spec, job.state, job.iterations, job.created, json.dumps(job.checks)))

    def discard(self, job_id: str) -> None:
        """Remove whatever a submission that was then refused left behind (files only: the job's
        row is written last)."""
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)

    def save(self, job: StoredJob) -> None:
        with _writing(self.root, f"job {job.id}"):
            self._update(job)

    def _update(self, job: StoredJob) -> None:
        self._db.execute(
            "UPDATE jobs SET state=?, iteration=?, elapsed=?, loss=?, reason=?, workers=?, stats=?, checks=? "
            "WHERE id=?",
            (job.state, job.iteration, job.elapsed, _sql(job.loss), job.reason, json.dumps(job.workers),
             json.dumps(job.stats), json.dumps(job.checks), job.id))

    def load_all(self) -> list[StoredJob]:
        rows = self._db.execute(
            "SELECT id, kind, spec, state, iterations, created, iteration, elapsed, loss, reason, workers, stats, "
            "checks FROM jobs ORDER BY created").fetchall()
        return [StoredJob(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], _nan(r[8]), r[9], json.loads(r[10]),
                          json.loads(r[11]), json.loads(r[12]), self._last_evaluation(r[0])) for r in rows]

    def _last_evaluation(self, job_id: str) -> Evaluation | None:
        row = self._db.execute(
            "SELECT iteration, test_loss, test_accuracy, test_auc FROM history WHERE job_id=? AND "
            "(test_loss IS NOT NULL OR test_accuracy IS NOT NULL OR test_auc IS NOT NULL) "
            "ORDER BY iteration DESC LIMIT 1", (job_id,)).fetchone()
        return None if row is None else Evaluation(row[0], _nan(row[1]), _nan(row[2]), _nan(row[3]))

    # --- history -----------------------------------------------------------------------------------

    def commit(self, job: StoredJob, records: Sequence[Record]) -> None:
        """Save a job's row and history records in one transaction."""
        first, last = records[0].iteration, records[-1].iteration
        what = f"iteration {first}" if first == last else f"iterations {first}-{last}"
        with _writing(self.root, f"{what} of job {job.id}"):
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    f"INSERT OR REPLACE INTO history ({HISTORY_COLUMNS}) VALUES ({', '.join('?' * 19)})",
                    [(job.id, r.iteration, _sql(r.loss), r.elapsed, r.duration, json.dumps(r.responders),
                      _sql(r.test_loss), _sql(r.test_accuracy), _sql(r.test_auc), json.dumps(r.worker_compute),
                      int(r.checked), r.detected, r.corrected, json.dumps(r.located), json.dumps(r.quarantined),
                      json.dumps({str(k): v for k, v in r.pieces.items()}), r.stopped_pieces,
                      json.dumps(r.worker_transfer), json.dumps(r.worker_reply)) for r in records])
                self._update(job)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def history(self, job_id: str, before: int | None = None, located_only: bool = False) -> list[Record]:
        """A job's records in order; ``before``: only iterations < before; ``located_only``: only
        those that located or quarantined workers (what a resumed job's quarantine is rebuilt from)."""
        where = "job_id=?" + ("" if before is None else " AND iteration < ?") + (
            " AND (located != '[]' OR quarantined != '[]')" if located_only else "")
        rows = self._db.execute(
            f"SELECT {HISTORY_COLUMNS.removeprefix('job_id, ')} FROM history WHERE {where} ORDER BY iteration",
            (job_id,) if before is None else (job_id, before)).fetchall()
        return [Record(r[0], _nan(r[1]), r[2], r[3], json.loads(r[4]), _nan(r[5]), _nan(r[6]), _nan(r[7]),
                       json.loads(r[8]), bool(r[9]), r[10], r[11], json.loads(r[12]), json.loads(r[13]),
                       {int(k): v for k, v in json.loads(r[14]).items()}, r[15], json.loads(r[16]), json.loads(r[17]))
                for r in rows]

    # --- files -------------------------------------------------------------------------------------

    def _write_atomic(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        with _writing(self.root, str(path.relative_to(self.root))):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(tmp, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)  # the previous file, if any, is untouched
                raise

    @staticmethod
    def _npz(arrays: dict[str, np.ndarray]) -> bytes:
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)  # type: ignore[arg-type]  # numpy's stub matches **arrays to allow_pickle
        return buffer.getvalue()

    def save_checkpoint(self, job_id: str, checkpoint: Checkpoint) -> None:
        arrays = {"params": checkpoint.params, "iteration": np.array(checkpoint.iteration)}
        arrays.update({f"optimizer/{k}": np.asarray(v) for k, v in checkpoint.optimizer.items()})
        self._write_atomic(self.job_dir(job_id) / "checkpoint.npz", self._npz(arrays))

    def load_checkpoint(self, job_id: str) -> Checkpoint | None:
        path = self.job_dir(job_id) / "checkpoint.npz"
        if not path.exists():
            return None
        with np.load(path, allow_pickle=False) as data:
            optimizer = {k.partition("/")[2]: data[k] for k in data.files if k.startswith("optimizer/")}
            return Checkpoint(int(data["iteration"]), data["params"].copy(), optimizer)

    def save_result(self, job_id: str, arrays: dict[str, np.ndarray]) -> None:
        self._write_atomic(self.job_dir(job_id) / "result.npz", self._npz(arrays))

    def load_result(self, job_id: str) -> dict[str, np.ndarray]:
        path = self.job_dir(job_id) / "result.npz"
        if not path.exists():
            raise NotFound(f"job {job_id} has no result")
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}

    def file_path(self, job_id: str, index: int) -> Path:
        return self.job_dir(job_id) / "files" / f"{index}"

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """A new empty directory for the files of one submission as they arrive; removed on exit,
        with whatever :meth:`keep_file` did not move out of it."""
        path = self.root / "uploads" / uuid.uuid4().hex
        with _writing(self.root, "an upload"):
            path.mkdir(parents=True)
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def receiving(self) -> AbstractContextManager[None]:
        """Around the writes of an upload's chunks into a :meth:`staging` directory: a refused
        write (a full disk) becomes the StorageError that names the state dir."""
        return _writing(self.root, "an upload")

    def keep_file(self, job_id: str, index: int, staged: Path) -> Path:
        """Move a file written in a :meth:`staging` directory to the job's files, durably (the
        file is synced before the rename); the two are on one file system, so nothing is copied."""
        path = self.file_path(job_id, index)
        with _writing(self.root, str(path.relative_to(self.root))):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(staged, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(staged, path)
        return path
