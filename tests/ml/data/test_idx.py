"""MNIST IDX files: parsed without pickle, malformed ones refused with the file's name."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from coded.ml.data.idx import read_idx


def idx_bytes(array: np.ndarray, code: int) -> bytes:
    return bytes([0, 0, code, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape) + array.tobytes()


def test_images_and_labels_round_trip(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labels = np.array([3, 1, 4, 1, 5], dtype=np.uint8)
    (tmp_path / "i").write_bytes(idx_bytes(images, 0x08))
    (tmp_path / "l.gz").write_bytes(gzip.compress(idx_bytes(labels, 0x08)))
    np.testing.assert_array_equal(read_idx(tmp_path / "i"), images)
    np.testing.assert_array_equal(read_idx(tmp_path / "l.gz"), labels)


@pytest.mark.parametrize(("data", "match"), [(b"\x01\x02\x08\x01", "bad magic"), (b"\x00\x00\x08\x02\x00", "truncated"),
                                             (bytes([0, 0, 8, 1, 0, 0, 0, 9]) + b"\x00" * 3, "needs 9")])
def test_malformed_files(tmp_path, data, match):
    path = tmp_path / "bad.idx"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=match):
        read_idx(path)
