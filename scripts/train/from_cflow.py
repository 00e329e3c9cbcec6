#!/usr/bin/python3
"""from_cflow.py -- a shipped .cflow model back into the trainer's directory.

The chat fine-tune (README.md, "The shipped chat model") starts from the
model data/default.cflow held before it; this writes that model's weights,
dequantised to f32, as the HF-style directory export.py writes (config.json,
model.safetensors, tokenizer files), so train.py --init can load it:

    from_cflow.py MODEL.cflow TOKDIR CONFIG.json OUT

TOKDIR gives vocab.json, merges.txt and tokenizer_config.json (the .cflow
file holds the vocabulary too, but in GGUF's form), CONFIG.json the
trainer's config.json of the same variant (tests/data/models/<variant>).

The .cflow v5 layout read here is src/format/fmt_layout.h's: the 88-byte
header, the layer table ((n_layers + 1) entries of 20 slots of 32 bytes),
tiled matrices as runs of (16-byte TileHeader, payload) and the payload
layout of src/kernels/kern.h (panels of 16 rows, column-major inside a
panel; Q8_0: the f16 scales of every panel and 32-column block, then the
quants as offset-binary bytes in quads of 4 columns).  Only what the
trainer's variants use is read: F32 and Q8_0 tiles, f32 vectors, f32
router matrices, expert offset tables; anything else is refused.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export import write_safetensors  # noqa: E402

F32, F16, Q8_0 = 0, 1, 2
K_VEC, K_TILED, K_F32MAT, K_EXPTABLE = 1, 2, 3, 4
NSLOT, SLOT = 20, 32
# tile matrix ids (enum fmt_matrix) -> trainer names in a layer
MATRIX = {0: "self_attn.q_proj", 1: "self_attn.k_proj", 2: "self_attn.v_proj",
          3: "self_attn.o_proj", 4: "mlp.gate_proj", 5: "mlp.up_proj",
          6: "mlp.down_proj", 8: "gate_proj", 9: "up_proj", 10: "down_proj",
          11: "embed_tokens"}
VECS = {0: "input_layernorm", 5: "post_attention_layernorm", 15: "moe_norm"}


def rup(x, m):
    return (x + m - 1) // m * m


def payload(t, rows, cols, b):
    """rows x cols f32 of one tile payload b (kern.h)."""
    rp, cp = rup(rows, 16), rup(cols, 32)
    if t == F32:
        a = np.frombuffer(b, "<f4", rp * cp).reshape(rp // 16, cp, 16)
        return a.transpose(0, 2, 1).reshape(rp, cp)[:rows, :cols], rp * cp * 4
    if t != Q8_0:
        sys.exit(f"from_cflow.py: tile type {t} is not read here")
    nb = cp // 32
    d = np.frombuffer(b, "<f2", rp * nb).astype(np.float32).reshape(rp // 16, nb, 16)
    q = np.frombuffer(b, np.uint8, rp * cp, rp * nb * 2).astype(np.int32) - 128
    # panel p, block b, quad g: byte[4i+j] = q[16p+i][32b+4g+j]
    q = q.reshape(rp // 16, nb, 8, 16, 4).transpose(0, 3, 1, 2, 4).reshape(rp // 16, 16, nb, 32)
    w = q * d.transpose(0, 2, 1)[:, :, :, None]
    return w.reshape(rp, cp)[:rows, :cols], rp * nb * 2 + rp * cp


def tiles(buf, off, length, types, shapes, out):
    """Walk (header, payload) tiles in buf[off:off+length] into out[(matrix,
    expert)] arrays; zero bytes up to a 64-byte boundary are padding."""
    end = off + length
    while off + 16 <= end:
        _layer, mat, exp, r0, c0, rows, cols, _qg = struct.unpack_from("<HBBIHHHH", buf, off)
        if rows == 0:
            off = rup(off + 1, 64)
            continue
        w, n = payload(types[mat], rows, cols, memoryview(buf)[off + 16:])
        key = (mat, exp)
        if key not in out:
            out[key] = np.zeros(shapes[mat], np.float32)
        out[key][r0:r0 + rows, c0:c0 + cols] = w
        off += 16 + n


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip().splitlines()[5].strip())
    path, tokdir, cfgpath, out = sys.argv[1:]
    buf = open(path, "rb").read()
    if buf[:8] != b"CFLOW\0\0\0" or struct.unpack_from("<H", buf, 8)[0] != 5:
        sys.exit(f"from_cflow.py: {path}: not a .cflow v5 file")
    L, d, ffn, effn, V = struct.unpack_from("<5I", buf, 12)
    H, K, hd, E = struct.unpack_from("<4H", buf, 36)
    table = struct.unpack_from("<Q", buf, 64)[0]
    with open(cfgpath) as f:
        cfg = json.load(f)
    cfg["vocab_size"] = V
    shapes = {0: (H * hd, d), 1: (K * hd, d), 2: (K * hd, d), 3: (d, H * hd),
              4: (ffn, d), 5: (ffn, d), 6: (d, ffn), 8: (effn, d), 9: (effn, d),
              10: (d, effn), 11: (V, d)}
    ts = []
    for e in range(L + 1):
        slots = [struct.unpack_from("<QQIIBBBBI", buf, table + (e * NSLOT + s) * SLOT)
                 for s in range(NSLOT)]
        types = {}
        for s, sl in enumerate(slots):
            # slot -> its matrix id: layer slots 1-4 q/k/v/o, 6-8 gate/up/down,
            # 11-13 expert gate/up/down; the last entry's slot 0 the embedding
            m = {1: 0, 2: 1, 3: 2, 4: 3, 6: 4, 7: 5, 8: 6, 11: 8, 12: 9, 13: 10}.get(s)
            if e == L:
                m = 11 if s == 0 else None
            if m is not None and sl[4] in (K_TILED, K_EXPTABLE):
                types[m] = sl[5]
        mats, seen = {}, set()
        for s, (off, ln, rows, cols, kind, typ, _g, _r, _n) in enumerate(slots):
            pre = "model.norm" if e == L else f"model.layers.{e}"
            if kind == K_TILED:
                # fused streams (Q/K/V, gate/up) share one range; the expert
                # bank (slots 11-13) is read through the expert table
                if (off, ln) not in seen and s not in (11, 12, 13):
                    seen.add((off, ln))
                    tiles(buf, off, ln, types, shapes, mats)
            elif kind == K_VEC and (e == L and s == 1):
                ts.append(("model.norm.weight", np.frombuffer(buf, "<f4", rows, off).copy()))
            elif kind == K_VEC and e < L and s in VECS:
                ts.append((f"{pre}.{VECS[s]}.weight", np.frombuffer(buf, "<f4", rows, off).copy()))
            elif kind == K_F32MAT and s == 9:
                a = np.frombuffer(buf, "<f4", rows * cols, off).reshape(rows, cols).copy()
                ts.append((f"{pre}.moe.router.weight", a))
            elif kind == K_EXPTABLE:
                for x in range(rows):
                    eo, el = struct.unpack_from("<QQ", buf, off + 16 * x)
                    tiles(buf, eo, el, types, shapes, mats)
            elif kind not in (0, 5):
                sys.exit(f"from_cflow.py: {path}: entry {e} slot {s} kind {kind} not read here")
        for (m, x), a in sorted(mats.items()):
            if m == 11:
                ts.append(("model.embed_tokens.weight", a))
            elif x == 0xFF:
                ts.append((f"model.layers.{e}.{MATRIX[m]}.weight", a))
        for m in (8, 9, 10):
            if (m, 0) in mats:
                a = np.stack([mats[(m, x)] for x in range(E)])
                ts.append((f"model.layers.{e}.moe.experts.{MATRIX[m]}.weight", a))
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), ts)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for fn in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokdir, fn), os.path.join(out, fn))
    print(f"{len(ts)} tensors -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
