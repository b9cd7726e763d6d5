"""Writes tests/data/npy/*.npy with NumPy's own writer, for tests/test_npy.c.

Each file holds v(n) = (i * 1.5 - 2) for i = 0 .. n-1 (reshaped; cast to the
dtype, so the integers truncate toward zero: -2, 0, 1, 2, 4, 5, ...; bools are
v != 0) unless said otherwise:
  f4_2x3, f8_2x3, f2_2x3, i4_2x3, i8_2x3, u1_2x3 (i * 3), b1_2x3  np.save, C order
  f8_scalar    0-d, 2.5                       f4_empty    (0, 3)
  f4_8d        (1, 2, 1, 2, 1, 1, 2, 1)       f4_fortran  (2, 3, 4), Fortran order
  f4_big       '>f4' (2, 3)                   i4_v2, f4_v3  versions 2.0 and 3.0
  i1_2x3, i2_2x3  int8, int16                 u4_3        uint32, arange(3)
  u2_2x3, u4_2x3, u8_2x3  uint16/32/64: the type's largest value less i * 3
  c8_2         complex64 (refused)
  str_2        '<U3' (refused)                struct_2    a structured dtype (refused)
Run with Debian's python3-numpy (1.24):
    /usr/bin/python3 tests/data/make_npy_fixtures.py
"""
import os

import numpy as np

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npy")
os.makedirs(HERE, exist_ok=True)


def v(n):
    return np.arange(n, dtype=np.float64) * 1.5 - 2


def save(name, a):
    np.save(os.path.join(HERE, name + ".npy"), a)


def write_version(name, a, version):
    with open(os.path.join(HERE, name + ".npy"), "wb") as f:
        np.lib.format.write_array(f, a, version=version)


for code in ("f4", "f8", "f2", "i4", "i8", "i1", "i2"):
    save(code + "_2x3", v(6).reshape(2, 3).astype(code))
save("u1_2x3", (np.arange(6) * 3).reshape(2, 3).astype(np.uint8))
save("b1_2x3", (v(6) != 0).reshape(2, 3))
save("f8_scalar", np.array(2.5))
save("f4_empty", np.zeros((0, 3), np.float32))
save("f4_8d", v(8).reshape(1, 2, 1, 2, 1, 1, 2, 1).astype(np.float32))
save("f4_fortran", np.asfortranarray(v(24).reshape(2, 3, 4).astype(np.float32)))
save("f4_big", v(6).reshape(2, 3).astype(">f4"))
write_version("i4_v2", v(6).reshape(2, 3).astype(np.int32), (2, 0))
write_version("f4_v3", v(6).reshape(2, 3).astype(np.float32), (3, 0))
save("u4_3", np.arange(3, dtype=np.uint32))
for code in ("u2", "u4", "u8"):
    save(code + "_2x3", (np.iinfo(code).max - np.arange(6, dtype=code) * 3).reshape(2, 3))
save("c8_2", np.array([1 + 2j, 3], np.complex64))
save("str_2", np.array(["ab", "c"]))
save("struct_2", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
