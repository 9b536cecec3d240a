"""A submission's files go to disk as their chunks arrive, under names the master chooses; an
accepted job's are moved into its state, and nothing else outlives the submission."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from coded.base.errors import TooLarge
from coded.master.convert import MAX_FILES, read_submission
from coded.master.store import JobStore
from coded.v1 import master_pb2
from coded.wire.tensor import TensorError


def chunk(name: str, offset: int, data: bytes) -> master_pb2.SubmitJobRequest:
    return master_pb2.SubmitJobRequest(file=master_pb2.FileChunk(name=name, offset=offset, data=data))


def read(messages: Sequence[master_pb2.SubmitJobRequest], directory: Path,
         max_upload: int = 1 << 20) -> tuple[str, dict[str, Path]]:
    async def stream() -> AsyncIterator[master_pb2.SubmitJobRequest]:
        for message in messages:
            yield message

    return asyncio.run(read_submission(stream(), max_upload, directory))


def test_files_are_written_in_order_of_arrival_under_names_the_master_chooses(tmp_path: Path):
    spec = master_pb2.SubmitJobRequest(spec="kind: matmul")
    hostile = "../../outside.npy"
    text, files = read([spec, chunk("a.npy", 0, b"abc"), chunk(hostile, 0, b"12"), chunk("a.npy", 3, b"de"),
                        chunk(hostile, 2, b"345")], tmp_path)
    assert text == "kind: matmul"
    assert files == {"a.npy": tmp_path / "0", hostile: tmp_path / "1"}
    assert (files["a.npy"].read_bytes(), files[hostile].read_bytes()) == (b"abcde", b"12345")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1"]  # nothing written anywhere else
    assert not (tmp_path.parent / "outside.npy").exists()


@pytest.mark.parametrize(("messages", "error", "message"), [
    ([], TensorError, "needs a spec"),
    ([chunk("a", 0, b"x")], TensorError, "first message of SubmitJob carries the spec"),
    ([master_pb2.SubmitJobRequest(spec="s"), chunk("a", 0, b"xy"), chunk("a", 3, b"z")], TensorError,
     "chunk at offset 3, expected 2"),
    ([master_pb2.SubmitJobRequest(spec="s"), chunk("a", 0, b"x" * 6), chunk("b", 0, b"y" * 5)], TooLarge,
     "exceed 10 bytes"),
    ([master_pb2.SubmitJobRequest(spec="s"), *(chunk(f"f{i}", 0, b"") for i in range(MAX_FILES + 1))], TooLarge,
     f"at most {MAX_FILES} files"),
])
def test_a_malformed_or_oversized_submission_is_refused(tmp_path: Path, messages, error, message):
    with pytest.raises(error, match=message):
        read(messages, tmp_path, max_upload=10)


def test_a_kept_file_moves_into_the_job_and_a_staging_dir_never_outlives_its_submission(tmp_path: Path):
    store = JobStore(tmp_path)
    with store.staging() as directory:
        (directory / "0").write_bytes(b"kept")
        (directory / "1").write_bytes(b"refused")
        kept = store.keep_file("job1", 0, directory / "0")
    assert kept == store.file_path("job1", 0) and kept.read_bytes() == b"kept"
    assert not directory.exists()
    with pytest.raises(RuntimeError), store.staging() as failed:
        (failed / "0").write_bytes(b"x")
        raise RuntimeError("the submission failed")
    assert not failed.exists()
    # a master killed while a client was uploading leaves its staging dir: the next one removes it
    left = tmp_path / "uploads" / "0123"
    left.mkdir(parents=True)
    (left / "0").write_bytes(b"half an upload")
    store.close()
    JobStore(tmp_path).close()
    assert not (tmp_path / "uploads").exists()
    assert store.file_path("job1", 0).read_bytes() == b"kept"
