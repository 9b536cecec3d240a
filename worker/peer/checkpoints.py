"""A CodeNet peer's checkpoints: its blocks at the last two saved versions, on its own disk."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Checkpoints"]


class Checkpoints:
    """The blocks peer ``index`` saved, as ``peer{index}-{version}.npz`` in ``directory``.

    The previous checkpoint is kept besides the last one: a rollback decided by a peer that has
    not saved the newest one yet targets the previous (docs/codenet.md).
    """

    def __init__(self, directory: Path, index: int) -> None:
        self.directory, self.index = directory, index
        self._versions: list[int] = []  # saved, oldest first (at most two)

    def _path(self, version: int) -> Path:
        return self.directory / f"peer{self.index}-{version}.npz"

    @property
    def last(self) -> int:
        """The version of the newest checkpoint (one is saved before training starts)."""
        return self._versions[-1]

    def save(self, version: int, blocks: Sequence[np.ndarray]) -> None:
        """Write the blocks (one per layer) at ``version`` atomically, then drop all checkpoints but
        this one and the one before it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        # typed Any: numpy's stubs would otherwise match the arrays against savez's allow_pickle
        arrays: dict[str, Any] = {f"layer{l}": block for l, block in enumerate(blocks)}
        buffer = io.BytesIO()
        np.savez(buffer, version=np.array(version), **arrays)
        path = self._path(version)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(buffer.getvalue())
        tmp.replace(path)  # a crash leaves the old checkpoint or the new one, never half of one
        previous = [v for v in self._versions if v < version][-1:]
        self._versions = [*previous, version]
        for old in self.directory.glob(f"peer{self.index}-*.npz"):
            if int(old.stem.rsplit("-", 1)[1]) not in self._versions:
                old.unlink()

    def restore(self, version: int, layers: int) -> list[np.ndarray]:
        """The blocks saved at ``version``, for a rollback there; later checkpoints are forgotten.

        Raises
        ------
        RuntimeError
            No checkpoint at ``version`` is kept.
        """
        if version not in self._versions:
            raise RuntimeError(f"no checkpoint at iteration {version} (have {self._versions})")
        with np.load(self._path(version), allow_pickle=False) as saved:
            blocks = [saved[f"layer{l}"].copy() for l in range(layers)]
        self._versions = [v for v in self._versions if v <= version]
        return blocks
