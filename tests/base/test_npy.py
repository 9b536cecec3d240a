"""Uploaded .npy and .npz files: whatever numpy writes without pickle reads back as numpy's own
loader reads it; anything else is refused with what the file is, never numpy's pickle advice."""

from __future__ import annotations

import contextlib
import io
import pickle
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from coded.base import npy
from coded.base.npy import ArrayFileError, read_arrays

DTYPES = ["<f8", ">f8", "<f4", "<f2", "<i8", ">i4", "|u1", "|i1", "|b1", "<c16"]


def npy_bytes(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return buffer.getvalue()


@settings(deadline=None)
@given(
    array=st.sampled_from(DTYPES).flatmap(
        lambda dtype: hnp.arrays(np.dtype(dtype), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6))),
    version=st.sampled_from([(1, 0), (2, 0), (3, 0)]),
    fortran=st.booleans(),
)
def test_every_npy_version_dtype_and_order_reads_as_numpy_reads_it(tmp_path_factory, array, version, fortran):
    path = tmp_path_factory.mktemp("npy") / "a.npy"
    path.write_bytes(npy_bytes(np.asfortranarray(array) if fortran else array, version))
    got = read_arrays(path)
    want = np.load(path, allow_pickle=False)  # independent: numpy's own loader
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert got.flags.writeable


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_members_by_name(tmp_path, save):
    arrays = {"x": np.arange(12.0).reshape(3, 4), "y": np.array([0, 1, 1]), "empty": np.zeros((0, 2))}
    save(tmp_path / "a.npz", **arrays)
    got = read_arrays(tmp_path / "a.npz")
    assert isinstance(got, dict) and sorted(got) == sorted(arrays)
    for name, array in arrays.items():
        np.testing.assert_array_equal(got[name], array)
        assert got[name].dtype == array.dtype


def zip_of(compression: int = zipfile.ZIP_STORED, **members: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


GOOD = npy_bytes(np.arange(12.0).reshape(3, 4))
HEADER = len(GOOD) - 96


def with_header(header: str) -> bytes:
    """A version 1.0 .npy file with this header dict and 16 data bytes."""
    text = header.encode("latin1")
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + bytes(16)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", r"^is empty \(0 bytes\)$"),
        (b"1,2,3\n4,5,6\n", r"^is text \('1,2,3\\n4,5,6\\n'\), not a .npy or .npz file$"),
        ("\u00e9x".encode() * 30,  # the 64 bytes looked at end inside a character: still text
         r"^is text \('(éx){12}'...\), not a .npy or .npz file$"),
        (pickle.dumps(np.ones(3)), r"^is a Python pickle, which is never loaded, not a .npy or .npz file$"),
        (bytes(range(200, 256)), r"^is not a .npy or .npz file \(it starts with b'\\xc8\\xc9"),
        (npy_bytes(np.ones(3))[:6] + b"\x04\x00" + npy_bytes(np.ones(3))[8:],
         r"^is a .npy file of format version 4.0, not one of 1.0, 2.0, 3.0$"),
        (GOOD[:20], r"^has a .npy header that cannot be read \(EOF: reading array header"),
        (with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, -1), }"),
         r"^has a .npy header with a negative dimension \(shape \(2, -1\)\)$"),
        (with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, __import__('os')), }"),
         r"^has a .npy header that cannot be read"),
        (GOOD[:-10], r"^is truncated: its .npy header promises a \(3, 4\) float64 array of 96 bytes, and 86 bytes "
                     r"follow it$"),
        (GOOD + b"\n", r"^has 1 bytes more than a \(3, 4\) float64 array of 96 bytes, which its .npy header promises$"),
        (zip_of(**{"x.npy": npy_bytes(np.ones(2)), "notes.txt": b"hi"}),
         r"^is an .npz archive whose member 'notes.txt' is not a .npy file \(members are NAME.npy files\)$"),
        (zip_of(**{"x.npy": b"1,2,3"}), r"^is an .npz archive whose member 'x.npy' is not a .npy file$"),
        (zip_of(**{"x.npy": GOOD[:-8]}), r"^is an .npz archive whose member 'x.npy' is truncated: "),
        (b"PK\x03\x04 and then nothing of a zip", r"^is a damaged .npz \(zip\) archive \("),
        (b"\x93NUMPY", r"^is a .npy file of format version missing, not one of 1.0, 2.0, 3.0$"),
        (b"\x93NUMPY\x02\x00" + (20000).to_bytes(4, "little") + b" " * 20000,
         r"^has a .npy header of 20000 bytes, more than 10000$"),
        (zip_of(**{"x.npy": GOOD, "y.npy": GOOD}, compression=zipfile.ZIP_BZIP2),
         r"^is an .npz archive whose member 'x.npy' is compressed by zip method 12, not stored \(0, as numpy.savez "
         r"writes\) or deflated \(8, as numpy.savez_compressed writes\)$"),
    ],
)
def test_refusals_say_what_the_file_is(tmp_path, content, message):
    path = tmp_path / "upload.npy"
    path.write_bytes(content)
    with pytest.raises(ArrayFileError, match=message) as caught:
        read_arrays(path)
    assert "allow_pickle" not in str(caught.value)


def test_object_arrays_are_never_unpickled(tmp_path):
    objects = np.array([{"a": 1}, None], dtype=object)
    np.save(tmp_path / "o.npy", objects, allow_pickle=True)
    with pytest.raises(ArrayFileError, match=r"^holds Python objects \(dtype object\), which are never unpickled$"):
        read_arrays(tmp_path / "o.npy")
    np.savez(tmp_path / "o.npz", x=np.ones(2), o=objects)
    with pytest.raises(ArrayFileError, match=r"^is an .npz archive whose member 'o.npy' holds Python objects"):
        read_arrays(tmp_path / "o.npz")


def test_a_member_that_decompresses_beyond_the_bound_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(npy, "MAX_ARRAY_BYTES", 1000)
    np.savez_compressed(tmp_path / "z.npz", x=np.zeros(1000))  # 8 KB of zeros compress to a few bytes
    with pytest.raises(ArrayFileError, match=r"member 'x.npy' decompresses to \d+ bytes, more than 1000"):
        read_arrays(tmp_path / "z.npz")


def npz_bytes(save, **arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    save(buffer, **arrays)
    return buffer.getvalue()


SEEDS = [GOOD, npz_bytes(np.savez, x=np.arange(5.0), y=np.ones((2, 2))),
         npz_bytes(np.savez_compressed, x=np.arange(50.0))]


@settings(deadline=None, max_examples=300)
@given(seed=st.sampled_from(SEEDS), edits=st.lists(st.tuples(
    st.floats(0, 1, exclude_max=True), st.sampled_from(["set", "cut", "insert"]), st.binary(min_size=1, max_size=8)),
    min_size=1, max_size=4))
def test_damaged_files_are_read_or_refused_with_what_they_are(tmp_path_factory, seed, edits):
    """Whatever the bytes, the outcome is arrays or an ArrayFileError (INVALID_ARGUMENT upstream),
    never another exception (INTERNAL)."""
    data = bytearray(seed)
    for where, how, what in edits:
        at = int(where * len(data))
        if how == "set":
            data[at : at + len(what)] = what
        elif how == "cut":
            del data[at : at + len(what)]
        else:
            data[at:at] = what
    path = tmp_path_factory.mktemp("fuzz") / "f"
    path.write_bytes(bytes(data))
    with contextlib.suppress(ArrayFileError):
        read_arrays(path)


def test_a_member_that_comes_twice_is_refused(tmp_path):
    """zip allows it and numpy would keep one of the two silently."""
    with zipfile.ZipFile(tmp_path / "twice.npz", "w") as archive, pytest.warns(UserWarning, match="Duplicate name"):
        archive.writestr("x.npy", GOOD)
        archive.writestr("x.npy", npy_bytes(np.ones(2)))
    with pytest.raises(ArrayFileError, match=r"^is an .npz archive whose member 'x.npy' comes twice$"):
        read_arrays(tmp_path / "twice.npz")
