"""Image datasets from the files users have: npz arrays, MNIST's IDX, CIFAR-10's binary batches.

Images are (N, C, H, W) (an (N, H, W) array is one channel); 8-bit images are scaled to [0, 1].
With ``normalize="per_channel"`` every channel is standardised with the mean and standard
deviation of the training images (the test images use the same statistics). Samples travel as
flat feature vectors, so the returned dataset holds (N, C*H*W) rows in C order, with the image
shape (C, H, W) in ``Dataset.shape`` for the models that take images.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from coded.base.npy import ArrayFileError, read_arrays

from .dataset import Dataset, split_off
from .idx import read_idx

__all__ = ["FORMATS", "load_images", "read_cifar10"]

FORMATS = ("npz", "idx", "cifar10")
CIFAR_RECORD = 1 + 3 * 32 * 32  # a label byte, then the red, green and blue 32 x 32 planes


def read_cifar10(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 3, 32, 32) uint8 and labels (N,) of one CIFAR-10 binary batch file.

    Raises
    ------
    ValueError
        Naming the file, when its size is not a whole number of records or a label is not 0..9.
    """
    raw = np.frombuffer(Path(path).read_bytes(), dtype=np.uint8)
    if raw.size == 0 or raw.size % CIFAR_RECORD:
        raise ValueError(f"{path}: {raw.size} bytes is not a whole number of "
                         f"{CIFAR_RECORD}-byte CIFAR-10 records")
    records = raw.reshape(-1, CIFAR_RECORD)
    labels = records[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise ValueError(f"{path}: label {labels.max()} is not a CIFAR-10 class (0..9)")
    return records[:, 1:].reshape(-1, 3, 32, 32), labels


def _read(fmt: str, paths: Sequence[Path]) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, C, H, W) and labels of one split."""
    if fmt == "cifar10":
        parts = [read_cifar10(p) for p in paths]
        return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])
    if fmt == "idx":
        if len(paths) != 2:
            raise ValueError(f"idx data are two files, images then labels (got {len(paths)})")
        images, labels = read_idx(paths[0]), read_idx(paths[1])
    else:
        if len(paths) != 1:
            raise ValueError(f"npz image data are one file with arrays x and y (got {len(paths)} files)")
        try:
            archive = read_arrays(paths[0])
        except ArrayFileError as error:
            raise ValueError(f"{paths[0]}: the file {error}: save the images with numpy.savez(file, x=images, "
                             'y=labels) (docs/jobs.md, "Uploaded files")') from None
        if not isinstance(archive, dict) or set(archive) != {"x", "y"}:
            has = sorted(archive) if isinstance(archive, dict) else "one .npy array, not an .npz archive"
            raise ValueError(f"{paths[0]}: needs exactly the arrays x and y (has {has})")
        images, labels = archive["x"], archive["y"]
    if images.ndim == 3:
        images = images[:, None]
    if images.ndim != 4 or labels.shape != (len(images),) or not len(images):
        raise ValueError(f"images of shape {list(images.shape)} and labels of shape {list(labels.shape)} do not "
                         "fit (want (N, C, H, W) or (N, H, W) images and N labels)")
    if labels.dtype.kind not in "iu" or labels.min() < 0:
        raise ValueError("labels must be integers 0..C-1")
    return images, labels.astype(np.int64)


def load_images(fmt: str, train: Sequence[Path], test: Sequence[Path] = (), normalize: str = "per_channel",
                name: str = "images", test_fraction: float = 0.0, seed: int = 0) -> Dataset:
    """A classification dataset of flattened images.

    Parameters
    ----------
    fmt : {"npz", "idx", "cifar10"}
    train, test : sequences of paths
        npz: one file (arrays ``x``, ``y``); idx: images then labels; cifar10: one or more batch
        files. ``test`` may be empty.
    normalize : {"per_channel", "none"}
    test_fraction, seed : float, int
        Without test files, a random ``test_fraction`` of the training images (permutation seeded
        by ``seed``) is held out as the test set, before the normalisation statistics are taken.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    x_train, y_train = _read(fmt, train)
    if test:
        x_test, y_test = _read(fmt, test)
    elif test_fraction:
        order = np.random.default_rng(seed).permutation(len(y_train))
        x_train, y_train, x_test, y_test = split_off(x_train[order], y_train[order], test_fraction)
    else:
        x_test, y_test = np.zeros((0, *x_train.shape[1:])), np.zeros(0, np.int64)
    if x_test.shape[1:] != x_train.shape[1:]:
        raise ValueError(f"test images {list(x_test.shape[1:])} differ from training images {list(x_train.shape[1:])}")
    scale = 255.0 if x_train.dtype == np.uint8 else 1.0
    x_train, x_test = x_train.astype(np.float64) / scale, x_test.astype(np.float64) / scale
    if not (np.all(np.isfinite(x_train)) and np.all(np.isfinite(x_test))):
        raise ValueError("images contain NaN or infinity")
    if normalize == "per_channel":
        axes = (0, *range(2, x_train.ndim))
        mean = x_train.mean(axis=axes, keepdims=True)
        std = x_train.std(axis=axes, keepdims=True)
        std[std == 0] = 1.0  # a constant channel stays constant
        x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    elif normalize != "none":
        raise ValueError(f"normalize must be per_channel or none (got {normalize!r})")
    classes = int(max(y_train.max(), y_test.max() if len(y_test) else 0)) + 1
    features = int(np.prod(x_train.shape[1:]))
    return Dataset(x_train.reshape(len(x_train), features), y_train, x_test.reshape(len(x_test), features), y_test,
                   classes=max(classes, 2), name=name, shape=tuple(x_train.shape[1:]))
