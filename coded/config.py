"""Environment variables, read in one place."""

from __future__ import annotations

import os

__all__ = ["default_master", "default_token", "default_torch_device"]


def default_master() -> str:
    """Master address when --master is not given: $CODED_MASTER or 127.0.0.1:50051."""
    return os.environ.get("CODED_MASTER", "127.0.0.1:50051")


def default_token() -> str | None:
    """Bearer token when --token is not given: $CODED_TOKEN (unset: no token)."""
    return os.environ.get("CODED_TOKEN") or None


def default_torch_device() -> str:
    """Where a worker's torch models compute when --torch-device is not given: $CODED_TORCH_DEVICE
    ("cpu", "cuda", "cuda:1"), else the CPU."""
    return os.environ.get("CODED_TORCH_DEVICE") or "cpu"
