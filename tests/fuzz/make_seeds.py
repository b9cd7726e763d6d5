#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>).

  python3 tests/fuzz/make_seeds.py

safetensors: files for fuzz_safetensors.c's collection (layer.weight F32
[2,3], scale F64 [], ids I64 [3], mask BOOL [4], empty I32 [0,2]): a good
one, with metadata, padded, reordered, and near misses (a dtype, a shape, a
name, offsets). ops: byte programs for fuzz_ops.c, one per family of calls
(the encoding is the interpreter's: an op byte, then its operands), plus
deterministic random ones. npy: NumPy's own files for fuzz_npy.c (every dtype
loom reads, 0-d, empty, 8 dims, Fortran order, big-endian, versions 2.0 and
3.0) and near misses (int8, a structured dtype, truncated, a bad header). Seeds are inputs, not expectations: a refused
file or an error tensor is as good a start as a success.
"""
import json
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- safetensors

TENSORS = [  # name, dtype, shape, packed data
    ("layer.weight", "F32", [2, 3], struct.pack("<6f", 1.5, -2, 3, 4, 5, 6.25)),
    ("scale", "F64", [], struct.pack("<d", 0.125)),
    ("ids", "I64", [3], struct.pack("<3q", -1, 0, 1 << 40)),
    ("mask", "BOOL", [4], bytes([1, 0, 0, 1])),
    ("empty", "I32", [0, 2], b""),
]


def safetensors(tensors, metadata=None, pad=0, order=None, header_size=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if order:
        header = {k: header[k] for k in order if k in header}
    text = json.dumps(header, separators=(",", ":")).encode() + b" " * pad
    n = len(text) if header_size is None else header_size
    return struct.pack("<Q", n) + text + data


def with_field(index, **changes):
    out = [list(t) for t in TENSORS]
    for k, v in changes.items():
        out[index][{"name": 0, "dtype": 1, "shape": 2, "raw": 3}[k]] = v
    return [tuple(t) for t in out]


def safetensors_seeds():
    write("safetensors", "good", safetensors(TENSORS))
    write("safetensors", "metadata", safetensors(TENSORS, {"format": "pt", "note": "x"}))
    write("safetensors", "padded", safetensors(TENSORS, pad=5))
    write("safetensors", "reordered",
          safetensors(TENSORS, order=["mask", "empty", "ids", "scale", "layer.weight"]))
    write("safetensors", "dtype_f16", safetensors(with_field(1, dtype="F16", raw=b"\0\0\0\0\0\0\0\0")))
    write("safetensors", "shape", safetensors(with_field(0, shape=[3, 2])))
    write("safetensors", "name", safetensors(with_field(2, name="idx")))
    write("safetensors", "missing", safetensors(TENSORS[:-1]))
    write("safetensors", "extra", safetensors(TENSORS + [("more", "U8", [2], b"\1\2")]))
    write("safetensors", "bool_2", safetensors(with_field(3, raw=bytes([2, 0, 255, 1]))))
    write("safetensors", "header_size", safetensors(TENSORS, header_size=1 << 40))
    write("safetensors", "truncated", safetensors(TENSORS)[:-7])
    write("safetensors", "empty_file", b"")
    write("safetensors", "not_json", struct.pack("<Q", 6) + b"{\"a\":[")


# ---------------------------------------------------------------- ops

# Op bytes of fuzz_ops.c's main loop (value % 16).
MAKE, UNARY, BINARY, SCALAR, CAST, REDUCE, VIEW, NN, GRAD, REALIZE, DROP, MATMUL = (
    0, 2, 4, 6, 7, 8, 9, 11, 12, 13, 14, 15)


def make_data(ndim, dims, dtype, values):
    # op, shape (ndim, 254 = not 9 dims, dims), dtype, kind 0 = data, bytes
    return bytes([MAKE, ndim, 0] + dims + [dtype, 0] + values)


def make_full(ndim, dims, dtype, value_index):
    return bytes([MAKE, ndim, 0] + dims + [dtype, 1, value_index])


def ops_seeds():
    f32 = 0  # dtype byte 0 -> F32, 1 -> F64, 2 -> I32, 3 -> I64, 4 -> U8, 5 -> BOOL
    a = make_data(2, [2, 3], f32, list(range(24)))
    b = make_full(2, [2, 3], f32, 4)
    seeds = {
        "unary": bytes([1]) + a + bytes([UNARY, 0, 2]) + bytes([UNARY, 1, 8]),
        "binary": bytes([1]) + a + b + bytes([BINARY, 0, 1, 0, BINARY, 1, 2, 3]),
        "scalar": bytes([0]) + a + bytes([SCALAR, 0, 4, 13, SCALAR, 0, 14, 14]),
        "reduce": bytes([1]) + a + bytes([REDUCE, 0, 1, 5, 1, 0, REDUCE, 0, 0, 0, 0, 6, 4]),
        "view": bytes([1]) + a + bytes([VIEW, 0, 0, 1, 0, 11, VIEW, 0, 7, 6, 3, 8, 3]),
        "matmul": bytes([1]) + a + make_data(2, [3, 2], f32, list(range(24))) + bytes([MATMUL, 0, 1]),
        # conv2d: x, w, no bias, sizes 1 (byte 2 -> -1 + 2), kind 1
        "conv": bytes([1]) + make_data(4, [1, 2, 3, 3], f32, list(range(72)))
        + make_full(4, [2, 2, 2, 2], f32, 1) + bytes([NN, 0, 1, 0] + [2] * 7 + [1]),
        # max pool 2 (bytes 3, 3 -> kernel 2, stride 2), kind 2
        "pool": bytes([1]) + make_data(4, [1, 2, 4, 4], f32, list(range(128)))
        + bytes([NN, 0, 0, 0, 3, 3, 1, 1, 1, 1, 1, 2]),
        "grad": bytes([1]) + a + bytes([GRAD, 0, 8, 0, 0]),
        "realize": bytes([0]) + a + bytes([REALIZE, 0, UNARY, 0, 12, DROP, 0]),
        "labels": bytes([1]) + make_data(2, [3, 4], f32, list(range(48)))
        + make_data(1, [3], 3, list(range(24))) + bytes([BINARY, 0, 1, 17]),
    }
    for name, data in seeds.items():
        write("ops", name, data)
    rng = random.Random(20261129)
    for i in range(24):
        write("ops", "random_%02d" % i, bytes(rng.randrange(256) for _ in range(rng.randrange(8, 160))))


# ---------------------------------------------------------------- npy


def npy_seeds():
    import io

    import numpy as np

    def save(name, a, version=None):
        f = io.BytesIO()
        np.lib.format.write_array(f, a, version=version)
        write("npy", name, f.getvalue())
        return f.getvalue()

    v = np.arange(6, dtype=np.float64).reshape(2, 3) * 1.5 - 2
    good = save("f4", v.astype(np.float32))
    for code in ("f8", "f2", "i4", "i8", "u1", "i1"):
        save(code, v.astype(code))
    save("b1", v != 0)
    save("scalar", np.array(2.5))
    save("empty", np.zeros((0, 3), np.int64))
    save("8d", np.arange(8, dtype=np.float32).reshape(1, 2, 1, 2, 1, 1, 2, 1))
    save("fortran", np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4)))
    save("big_endian", v.astype(">f8"))
    save("v2", v.astype(np.int32), (2, 0))
    save("v3", v.astype(np.float16), (3, 0))
    save("structured", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
    write("npy", "truncated", good[:-5])
    write("npy", "shape_paren", good.replace(b"(2, 3)", b"(6)   "))


if __name__ == "__main__":
    npy_seeds()
    safetensors_seeds()
    ops_seeds()
