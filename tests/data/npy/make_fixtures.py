#!/usr/bin/python3
"""Writes the .npy fixtures of tests/unit/test_npy.c with numpy itself.

Run with Debian's /usr/bin/python3 (it has numpy) from this directory:
    /usr/bin/python3 make_fixtures.py
The values follow simple formulas that test_npy.c recomputes in C, so the
test checks numpy's bytes against independently computed numbers.
"""
import numpy as np

fmt = np.lib.format


def save(name, a, version=None):
    with open(name, "wb") as f:
        if version is None:
            np.save(f, a)  # what users do: format 1.0
        else:
            fmt.write_array(f, a, version=version)


# One file per PE dtype (format 1.0, as np.save writes it).
save("f4.npy", ((np.arange(6, dtype=np.float32) - 2.5) * 0.75).reshape(2, 3))
save("f8.npy", (np.arange(24, dtype=np.float64) / 8 - 1).reshape(2, 3, 4))
save("i4.npy", (np.arange(12, dtype=np.int32) * 1000003 - 6000000).reshape(3, 4))
save("i8.npy", (np.arange(5, dtype=np.int64) - 2) * 10**12)
save("u1.npy", np.arange(256, dtype=np.uint8).reshape(16, 16))
save("b1.npy", np.arange(7) % 3 == 0)
save("f2.npy", (np.arange(8, dtype=np.float16) / 4 - 1).reshape(2, 2, 2))
save("scalar_f8.npy", np.array(3.25))
save("empty_f4.npy", np.zeros((0, 3), dtype=np.float32))
save("rank8_u1.npy", np.arange(256, dtype=np.uint8).reshape(2, 2, 2, 2, 2, 2, 2, 2))
# Format 2.0 (4-byte header length) and 3.0 (utf-8 header).
save("v2_f4.npy", np.arange(6, dtype=np.float32).reshape(3, 2), version=(2, 0))
save("v3_i8.npy", np.arange(4, dtype=np.int64) * -3, version=(3, 0))
# Valid numpy files PE must refuse.
save("fortran_f4.npy", np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
save("bigendian_f4.npy", np.arange(4, dtype=">f4"))
save("complex_c8.npy", np.arange(3, dtype=np.complex64))
save("structured.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
with open("object.npy", "wb") as f:
    np.save(f, np.array([1, "x", None], dtype=object), allow_pickle=True)
