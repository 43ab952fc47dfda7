#!/usr/bin/python3
"""Writes tests/data/safetensors/fixture.safetensors by hand, byte by byte,
following the safetensors format (https://github.com/huggingface/safetensors):
8-byte little-endian header length, compact JSON header padded with spaces to
a multiple of 8, then the tensors' little-endian bytes.

The JSON lists the tensors in a different order than their data (readers must
sort by data_offsets) and carries "__metadata__". Values follow formulas that
tests/unit/test_safetensors.c recomputes in C. Run with /usr/bin/python3.
"""
import json
import struct

import numpy as np

tensors = {  # name -> (safetensors dtype, array as little-endian bytes source)
    "weight": ("F32", ((np.arange(6, dtype="<f4") - 2.5) * 0.75).reshape(2, 3)),
    "bias": ("F64", np.arange(3, dtype="<f8") / 8 - 1),
    "step": ("I64", np.array(1234567890123, dtype="<i8")),
    "ids": ("I32", (np.arange(4, dtype="<i4") * 1000003 - 6000000).reshape(2, 2)),
    "pixels": ("U8", np.arange(5, dtype="u1") * 50),
    "mask": ("BOOL", np.arange(4) % 3 == 0),
    "half": ("F16", (np.arange(4, dtype="<f2") / 4 - 1).reshape(2, 2)),
    # bfloat16: the top 16 bits of float32 (values exact in bf16).
    "bhalf": ("BF16", (np.array([1.0, -2.5, 0.15625], dtype="<f4").view("<u4") >> 16).astype("<u2")),
}
data_order = ["bhalf", "mask", "weight", "step", "half", "ids", "bias", "pixels"]
json_order = ["weight", "bias", "step", "ids", "pixels", "mask", "half", "bhalf"]

blobs, offsets, pos = [], {}, 0
for name in data_order:
    raw = tensors[name][1].tobytes()
    offsets[name] = [pos, pos + len(raw)]
    blobs.append(raw)
    pos += len(raw)

header = {"__metadata__": {"format": "pt", "source": "make_fixture.py"}}
for name in json_order:
    dt, arr = tensors[name]
    header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": offsets[name]}
text = json.dumps(header, separators=(",", ":")).encode("utf-8")
text += b" " * (-len(text) % 8)

with open("fixture.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    f.write(b"".join(blobs))
