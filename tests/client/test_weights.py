"""Results in the files other tools load: safetensors read back by the safetensors package itself
(part of the base install), .pt read back by torch.load(weights_only=True)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coded.client.weights import write_result, write_safetensors

ARRAYS = {"0.weight": np.arange(24.0).reshape(2, 3, 4), "0.bias": np.array([0.5, -1.25]),
          "steps": np.array([3, 1], dtype=np.int64)}


def test_safetensors_files_read_back_with_the_safetensors_package(tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import load_file

    path = tmp_path / "w.safetensors"
    write_safetensors(path, ARRAYS, {"coded.job": "abc", "coded.model": json.dumps({"name": "lenet"})})
    loaded = load_file(path)
    assert set(loaded) == set(ARRAYS)
    for name, array in ARRAYS.items():
        assert loaded[name].dtype == array.dtype and np.array_equal(loaded[name], array)
    with safe_open(path, framework="numpy") as handle:
        assert handle.metadata() == {"coded.job": "abc", "coded.model": '{"name": "lenet"}'}


def test_a_float32_result_written_without_pytorch_reads_back_in_float32(tmp_path):
    """The .safetensors writer needs no PyTorch: a float32 result reads back with numpy alone."""
    from safetensors.numpy import load_file

    path = tmp_path / "model.safetensors"
    floats = {k: v for k, v in ARRAYS.items() if v.dtype == np.float64}
    write_result(path, floats, dtype="float32", metadata={"coded.job": "abc"})
    loaded = load_file(path)
    assert set(loaded) == set(floats)
    for name, array in floats.items():
        assert loaded[name].dtype == np.float32 and np.array_equal(loaded[name], array.astype(np.float32))


@pytest.mark.torch
@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_a_state_dict_in_float32_loads_into_torch(tmp_path, suffix):
    import torch
    from safetensors.torch import load_file

    path = tmp_path / f"model{suffix}"
    floats = {k: v for k, v in ARRAYS.items() if v.dtype == np.float64}
    write_result(path, floats, dtype="float32", metadata={"coded.job": "abc"})
    state = torch.load(path, weights_only=True) if suffix == ".pt" else load_file(path)
    assert list(state) == list(floats) if suffix == ".pt" else set(state) == set(floats)
    for name, array in floats.items():
        assert state[name].dtype == torch.float32 and np.array_equal(state[name].numpy(), array.astype(np.float32))


def test_an_unknown_suffix_is_refused_naming_the_formats(tmp_path):
    with pytest.raises(ValueError, match=r"--out: write a \.npz or \.npy or \.safetensors or \.pt file"):
        write_result(tmp_path / "x.h5", ARRAYS)
