#!/usr/bin/env python3
"""List a GGUF's tensors: name, GGML type and the FNV-1a 64 of its bytes.

Made for tests/data/quant/mix.txt (README.md): it reads the files that
llama.cpp's llama-quantize wrote, independently of cflow's reader.
Standard library only.  Usage: gguf_tensors.py FILE [PREFIX]
prints "PREFIX name type fnv64" per tensor, in the file's order.
"""
import struct
import sys

# GGML type: (name, block columns, block bytes), from ggml.c's type_traits
TYPES = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34),
    10: ("q2_k", 256, 84), 11: ("q3_k", 256, 110), 12: ("q4_k", 256, 144),
    13: ("q5_k", 256, 176), 14: ("q6_k", 256, 210), 20: ("iq4_nl", 32, 18),
    23: ("iq4_xs", 256, 136), 30: ("bf16", 1, 2), 39: ("mxfp4", 32, 17),
}


def fnv64(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    path, prefix = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    d = open(path, "rb").read()
    o = 0

    def take(fmt):
        nonlocal o
        v = struct.unpack_from("<" + fmt, d, o)
        o += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal o
        n = take("Q")
        s = d[o:o + n].decode()
        o += n
        return s

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def value(t):
        nonlocal o
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        v = d[o:o + sizes[t]]
        o += sizes[t]
        return v

    assert d[:4] == b"GGUF"
    o = 4
    _, n_t, n_kv = take("I"), take("Q"), take("Q")
    align = 32
    for _ in range(n_kv):
        k, t = string(), take("I")
        v = value(t)
        if k == "general.alignment":
            align = struct.unpack("<I", v)[0]
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        t, off = take("I"), take("Q")
        infos.append((name, ne, t, off))
    base = (o + align - 1) // align * align
    for name, ne, t, off in infos:
        tn, blk, bb = TYPES[t]
        n = 1
        for x in ne:
            n *= x
        nbytes = n // blk * bb
        print(f"{prefix}{name} {tn} {fnv64(d[base + off:base + off + nbytes]):016x}")


if __name__ == "__main__":
    main()
