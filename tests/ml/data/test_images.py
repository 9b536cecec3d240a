"""Image files users have: npz arrays, MNIST IDX, CIFAR-10 binary batches; per-channel statistics."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from coded.ml.data import load_images
from coded.ml.data.images import CIFAR_RECORD


def idx_bytes(array: np.ndarray) -> bytes:
    return bytes([0, 0, 0x08, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape) + array.tobytes()


def cifar_bytes(labels: list[int], planes: list[tuple[int, int, int]]) -> bytes:
    records = []
    for label, (r, g, b) in zip(labels, planes, strict=True):
        records.append(bytes([label]) + bytes([r]) * 1024 + bytes([g]) * 1024 + bytes([b]) * 1024)
    return b"".join(records)


def test_npz_images_are_standardised_per_channel_with_the_training_statistics(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (20, 3, 4, 4), dtype=np.uint8)
    x_test = rng.integers(0, 256, (5, 3, 4, 4), dtype=np.uint8)
    np.savez(tmp_path / "train.npz", x=x, y=np.arange(20) % 4)
    np.savez(tmp_path / "test.npz", x=x_test, y=np.arange(5) % 4)
    data = load_images("npz", [tmp_path / "train.npz"], [tmp_path / "test.npz"])
    assert data.x_train.shape == (20, 48) and data.x_test.shape == (5, 48) and data.classes == 4
    scaled = x.astype(np.float64) / 255
    mean, std = scaled.mean(axis=(0, 2, 3)), scaled.std(axis=(0, 2, 3))
    for c in range(3):
        expected = (x_test[:, c].astype(np.float64) / 255 - mean[c]) / std[c]
        assert np.allclose(data.x_test.reshape(5, 3, 4, 4)[:, c], expected, rtol=0, atol=1e-12)
    channels = data.x_train.reshape(20, 3, 16)
    assert np.allclose(channels.mean(axis=(0, 2)), 0, atol=1e-12) and np.allclose(channels.std(axis=(0, 2)), 1)


def test_idx_images_are_one_channel(tmp_path):
    images = np.random.default_rng(1).integers(0, 256, (6, 8, 8), dtype=np.uint8)
    (tmp_path / "i").write_bytes(idx_bytes(images))
    (tmp_path / "l").write_bytes(idx_bytes(np.array([0, 1, 2, 0, 1, 2], dtype=np.uint8)))
    data = load_images("idx", [tmp_path / "i", tmp_path / "l"], normalize="none")
    assert np.array_equal(data.x_train, images.reshape(6, 64) / 255) and data.y_train.tolist() == [0, 1, 2, 0, 1, 2]


def test_cifar10_records_are_a_label_and_three_planes_in_order(tmp_path):
    (tmp_path / "b1").write_bytes(cifar_bytes([3, 7], [(10, 20, 30), (1, 2, 3)]))
    (tmp_path / "b2").write_bytes(cifar_bytes([9], [(255, 0, 128)]))
    data = load_images("cifar10", [tmp_path / "b1", tmp_path / "b2"], normalize="none")
    assert data.y_train.tolist() == [3, 7, 9] and data.classes == 10
    first = data.x_train[0].reshape(3, 32, 32)
    assert (first[0] == 10 / 255).all() and (first[1] == 20 / 255).all() and (first[2] == 30 / 255).all()


@pytest.mark.parametrize(
    ("fmt", "content", "message"),
    [
        ("cifar10", b"\x00" * (CIFAR_RECORD + 5), "is not a whole number of 3073-byte CIFAR-10 records"),
        ("cifar10", bytes([12]) + b"\x00" * (CIFAR_RECORD - 1), "label 12 is not a CIFAR-10 class"),
    ],
)
def test_malformed_cifar_files_are_named(tmp_path, fmt, content, message):
    (tmp_path / "bad.bin").write_bytes(content)
    with pytest.raises(ValueError, match=f"bad.bin: .*{message}"):
        load_images(fmt, [tmp_path / "bad.bin"])


def test_npz_needs_x_and_y_and_labels_that_fit(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros((3, 2, 2)))
    with pytest.raises(ValueError, match=r"a.npz: needs exactly the arrays x and y"):
        load_images("npz", [tmp_path / "a.npz"])
    np.savez(tmp_path / "b.npz", x=np.zeros((3, 2, 2)), y=np.zeros(4, dtype=int))
    with pytest.raises(ValueError, match=r"do not fit"):
        load_images("npz", [tmp_path / "b.npz"])


def test_held_out_images_do_not_enter_the_normalisation_statistics(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (40, 2, 3, 3), dtype=np.uint8)
    np.savez(tmp_path / "all.npz", x=x, y=np.arange(40) % 3)
    data = load_images("npz", [tmp_path / "all.npz"], test_fraction=0.25, seed=5)
    assert data.x_train.shape == (30, 18) and data.x_test.shape == (10, 18) and data.shape == (2, 3, 3)
    channels = data.x_train.reshape(30, 2, 9)  # standardised with the 30 training images alone
    assert np.allclose(channels.mean(axis=(0, 2)), 0, atol=1e-12) and np.allclose(channels.std(axis=(0, 2)), 1)
    held_out = np.random.default_rng(5).permutation(40)[30:]  # the rows split_off holds out
    assert sorted(data.y_test.tolist()) == sorted((held_out % 3).tolist())
