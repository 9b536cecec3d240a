"""Array <-> proto round trips over every allowed dtype, and malformed streams."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from coded.v1 import tensor_pb2
from coded.wire.tensor import ALLOWED_DTYPES, ChunkAssembler, TensorError, from_chunks, from_proto, to_chunks, to_proto


@given(
    array=st.sampled_from(sorted(ALLOWED_DTYPES)).flatmap(
        lambda dtype: hnp.arrays(np.dtype(dtype), hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=7))),
    chunk=st.integers(1, 64),
)
def test_round_trips(array, chunk):
    np.testing.assert_array_equal(from_proto(to_proto(array)), array)
    back = from_chunks(to_chunks(array, "a", chunk_bytes=chunk))["a"]
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)


def test_big_endian_is_sent_little_endian():
    array = np.arange(5, dtype=">f8")
    np.testing.assert_array_equal(from_proto(to_proto(array)), array)


def test_several_arrays_in_one_stream():
    arrays = {"w": np.random.default_rng(0).standard_normal((3, 4)), "b": np.zeros(0), "n": np.arange(7)}
    chunks = [c for name, a in arrays.items() for c in to_chunks(a, name, chunk_bytes=8)]
    got = from_chunks(chunks)
    assert list(got) == list(arrays)
    for name in arrays:
        np.testing.assert_array_equal(got[name], arrays[name])


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (tensor_pb2.Tensor(dtype="<f8", shape=[3], data=b"\0" * 16), "has 16 bytes"),
        (tensor_pb2.Tensor(dtype="O", shape=[1], data=b"\0" * 8), "unsupported dtype"),
        (tensor_pb2.Tensor(dtype="<f8", shape=[-1], data=b""), "invalid shape"),
        (tensor_pb2.Tensor(dtype="<f8", shape=[1 << 40], data=b""), "exceeds the limit"),
    ],
)
def test_malformed_tensors(message, match):
    with pytest.raises(TensorError, match=match):
        from_proto(message)


def test_unsendable_dtype():
    with pytest.raises(TensorError, match="cannot be sent"):
        to_proto(np.array(["a"], dtype=object))


def test_malformed_streams():
    chunks = list(to_chunks(np.arange(10.0), chunk_bytes=16))
    with pytest.raises(TensorError, match="expected 16"):
        assembler = ChunkAssembler()
        assembler.add(chunks[0])
        assembler.add(chunks[2])  # out of order
    with pytest.raises(TensorError, match="truncated"):
        from_chunks(chunks[:-1])
    with pytest.raises(TensorError, match="must carry its dtype"):
        from_chunks(chunks[1:])
    extra = tensor_pb2.TensorChunk(offset=80, data=b"\0" * 8)
    with pytest.raises(TensorError, match="exceed"):
        from_chunks([*chunks, extra])
    with pytest.raises(TensorError, match="exceeds the limit"):
        from_chunks(chunks, max_bytes=40)
