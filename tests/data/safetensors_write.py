"""write(path, tensors): a safetensors file of named torch tensors (F32, F64,
I64, BF16, F16), for the fixture scripts beside it."""
import json
import struct

import torch

NAMES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64",
         torch.bfloat16: "BF16", torch.float16: "F16"}


def write(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        bits = t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t
        data = bits.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
