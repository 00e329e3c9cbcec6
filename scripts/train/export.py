"""export.py -- write a trained model as a Hugging Face-style directory.

Layout (ARCHITECTURES.md, last section): config.json, model.safetensors,
vocab.json, merges.txt, tokenizer_config.json.

model.safetensors is written by hand (no safetensors package): an 8-byte
little-endian u64 header length N, then N bytes of JSON header
{"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]},
 ..., "__metadata__": {"format": "pt"}} padded with spaces to a multiple of
8, then the tensors' little-endian f32 data, back to back, in the header's
order (offsets are relative to the start of the data section).

Tensor names map from the PyTorch module names in model.py:
  embed_tokens.weight                  -> model.embed_tokens.weight
  norm.weight                          -> model.norm.weight
  layers.N.<...>                       -> model.layers.N.<...>
  layers.N.moe.experts.gate_proj       -> model.layers.N.moe.experts.gate_proj.weight
  (likewise up_proj, down_proj)
"""
import json
import os
import shutil
import struct
import sys

import numpy as np


def hf_name(name):
    if name.startswith("layers.") and ".moe.experts." in name:
        name = name + ".weight"
    return "model." + name


def write_safetensors(path, tensors):
    """tensors: list of (name, np.ndarray f32)."""
    header, off = {}, 0
    blobs = []
    for name, a in tensors:
        a = np.ascontiguousarray(a, dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """Inverse of write_safetensors (F32 only): dict name -> np.ndarray."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32"
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(data[b:e], dtype="<f4").reshape(v["shape"])
    return out


def export(model, tokdir, outdir, extra_config=None):
    import torch  # noqa: F401  (model is a torch module)
    os.makedirs(outdir, exist_ok=True)
    cfg = dict(model.c)
    if extra_config:
        cfg.update(extra_config)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tensors = []
    for name, p in model.state_dict().items():
        tensors.append((hf_name(name), p.detach().cpu().float().numpy()))
    write_safetensors(os.path.join(outdir, "model.safetensors"), tensors)
    for fn in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, fn), os.path.join(outdir, fn))


def load(modeldir):
    """Rebuild a CflowModel from an exported directory (used by eval/trace)."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from model import CflowModel
    with open(os.path.join(modeldir, "config.json")) as f:
        c = json.load(f)
    m = CflowModel(c)
    st = read_safetensors(os.path.join(modeldir, "model.safetensors"))
    sd = {}
    for name in m.state_dict():
        sd[name] = torch.from_numpy(st[hf_name(name)].copy())
    m.load_state_dict(sd)
    m.eval()
    return m
