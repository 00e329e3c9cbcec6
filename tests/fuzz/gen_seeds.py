#!/usr/bin/env python3
"""gen_seeds.py -- write the fuzzers' seed corpora (tests/fuzz/corpus/).

Every seed is made here from nothing: tiny random-weight models and tiny
vocabularies in each container cflow reads, so the repository carries no
third-party data and each seed stays a few KB (libFuzzer mutates small
inputs far faster than large ones).  The generated files are committed;
rerun this after changing it:

    python3 tests/fuzz/gen_seeds.py [--cflow BUILD/cflow]

With --cflow, the .cflow and .vflow seeds are made by converting some of
the generated sources with the real converter (q4_0, q8_0, f16, f32, MoE,
every GGML block type and a q4_k_m mix);
without it the cflow/ corpus is left as it is.  Weights come from a fixed-seed PRNG, so
the output is reproducible byte for byte.

Multi-file inputs (a Hugging Face directory, a llama2.c checkpoint with its
tokenizer) use the archive form the fuzz targets split (fuzz_common.c):

    @@file NAME\\n<bytes of NAME>\\n@@file NAME2\\n<bytes>...

NAME must be one of the file names fuzz_common.c accepts.
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
rng = random.Random(20240501)


def rand_f32(n, scale=0.1):
    return [rng.uniform(-scale, scale) for _ in range(n)]


# ---- small binary helpers ------------------------------------------------
def u32(v): return struct.pack("<I", v)
def i32(v): return struct.pack("<i", v)
def u64(v): return struct.pack("<Q", v)
def f32(v): return struct.pack("<f", v)
def f32s(vs): return struct.pack("<%df" % len(vs), *vs)
def f16s(vs): return struct.pack("<%de" % len(vs), *vs)


def bf16s(vs):
    out = bytearray()
    for v in vs:
        out += struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:]
    return bytes(out)


def archive(files):
    """files: list of (name, bytes) -> the multi-file archive form."""
    out = bytearray()
    for name, data in files:
        out += b"@@file " + name.encode() + b"\n" + data
        if files[-1][0] != name:
            out += b"\n"
    return bytes(out)


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- GGML quantisation (reference layouts) -------------------------------
def q8_0(vals):
    out = bytearray()
    for b in range(0, len(vals), 32):
        blk = vals[b:b + 32]
        amax = max(abs(x) for x in blk)
        d = amax / 127 if amax else 0.0
        out += struct.pack("<e", d)
        out += bytes((round(x / d) if d else 0) & 0xFF for x in blk)
    return bytes(out)


def q4_0(vals):
    out = bytearray()
    for b in range(0, len(vals), 32):
        blk = vals[b:b + 32]
        mx = max(blk, key=abs)
        d = mx / -8 if mx else 0.0
        q = [min(15, int(x / d + 8.5)) if d else 8 for x in blk]
        out += struct.pack("<e", d)
        out += bytes(q[j] | (q[j + 16] << 4) for j in range(16))
    return bytes(out)


DT_F32, DT_F16, DT_Q4_0, DT_Q8_0, DT_BF16 = 0, 1, 2, 8, 30

# The other GGML block types cflow keeps (issue 41): columns and bytes of
# a block, and the offsets of its f16 scales (MXFP4: its E8M0 byte at 0).
DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_IQ4_NL, DT_MXFP4 = 3, 6, 7, 20, 39
DT_Q2_K, DT_Q3_K, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_IQ4_XS = 10, 11, 12, 13, 14, 23
BLOCKS = {DT_Q4_1: (32, 20, (0, 2)), DT_Q5_0: (32, 22, (0,)),
          DT_Q5_1: (32, 24, (0, 2)), DT_IQ4_NL: (32, 18, (0,)),
          DT_MXFP4: (32, 17, ()), DT_Q2_K: (256, 84, (80, 82)),
          DT_Q3_K: (256, 110, (108,)), DT_Q4_K: (256, 144, (0, 2)),
          DT_Q5_K: (256, 176, (0, 2)), DT_Q6_K: (256, 210, (208,)),
          DT_IQ4_XS: (256, 136, (0,))}


def blocks(n, dt, r):
    """n weights of block type dt: random quants under small finite scales
    (their values do not matter to a fuzzer, only that they decode)."""
    cols, size, scales = BLOCKS[dt]
    out = bytearray()
    for _ in range(n // cols):
        b = bytearray(r.getrandbits(8) for _ in range(size))
        for o in scales:
            b[o:o + 2] = struct.pack("<e", r.uniform(0.001, 0.01))
        if dt == DT_MXFP4:
            b[0] = r.randrange(0x70, 0x7A)
        out += b
    return bytes(out)


def encode(vals, dt):
    if dt == DT_F32:
        return f32s(vals)
    if dt == DT_F16:
        return f16s(vals)
    if dt == DT_Q8_0:
        return q8_0(vals)
    if dt == DT_Q4_0:
        return q4_0(vals)
    if dt == DT_BF16:
        return bf16s(vals)
    raise ValueError(dt)


# ---- GGUF key/values (also the .cflow metadata encoding) -----------------
KV_U8, KV_I8, KV_U16, KV_I16, KV_U32, KV_I32, KV_F32, KV_BOOL, KV_STR, \
    KV_ARR, KV_U64, KV_I64, KV_F64 = range(13)
SCALAR_FMT = {KV_U8: "<B", KV_I8: "<b", KV_U16: "<H", KV_I16: "<h",
              KV_U32: "<I", KV_I32: "<i", KV_F32: "<f", KV_BOOL: "<B",
              KV_U64: "<Q", KV_I64: "<q", KV_F64: "<d"}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b)) + b


def kv_value(t, v):
    if t == KV_STR:
        return gstr(v)
    return struct.pack(SCALAR_FMT[t], v)


def kv(key, t, v, et=None):
    out = gstr(key) + u32(t)
    if t == KV_ARR:
        out += u32(et) + u64(len(v))
        for x in v:
            out += kv_value(et, x)
    else:
        out += kv_value(t, v)
    return out


def gguf(kvs, tensors, version=3, align=32):
    """kvs: list of kv() blobs; tensors: list of (name, ne, dtype, data)."""
    head = b"GGUF" + u32(version) + u64(len(tensors)) + u64(len(kvs))
    head += b"".join(kvs)
    data = bytearray()
    infos = bytearray()
    for name, ne, dt, blob in tensors:
        pad = (-len(data)) % align
        data += b"\0" * pad
        infos += gstr(name) + u32(len(ne))
        for x in ne:
            infos += u64(x)
        infos += u32(dt) + u64(len(data))
        data += blob
    body = head + bytes(infos)
    body += b"\0" * ((-len(body)) % align)
    return body + bytes(data)


# ---- vocabularies --------------------------------------------------------
SPM = "\u2581"
SPM_WORDS = ["a", "b", "c", "d", "e", "h", "i", "l", "n", "o", "r", "s", "t",
             "u", "y", ".", ",", SPM, SPM + "the", SPM + "a", SPM + "once",
             "on", "ce", SPM + "up", SPM + "time", "he", "ll", "llo",
             SPM + "hello", SPM + "T", "im", "ti", "me", SPM + "there", "er",
             SPM + "was"]


def spm_vocab(byte_tokens=False):
    """(tokens, scores, types) of a tiny SentencePiece vocabulary."""
    toks = ["<unk>", "<s>", "</s>"]
    types = [2, 3, 3]
    if byte_tokens:
        toks += ["<0x%02X>" % b for b in range(256)]
        types += [6] * 256
    toks += SPM_WORDS
    types += [1] * len(SPM_WORDS)
    scores = [0.0] * len(toks)
    for i in range(len(toks)):
        if types[i] == 1:
            scores[i] = -float(i)
    return toks, scores, types


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + \
        list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def bl(s):
    """text -> its byte-level (GPT-2) token spelling"""
    return "".join(B2U[b] for b in s.encode())


BPE_MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"),
              ("Ġ", "t"), ("Ġt", "h"), ("Ġth", "e"), ("Ġ", "w"), ("o", "r"),
              ("Ġw", "or"), ("Ġwor", "l"), ("Ġworl", "d"), ("1", "2"),
              ("Ċ", "Ċ"), ("Ġ", "Ġ"), ("i", "n"), ("Ġ", "in")]


def bpe_vocab(specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>")):
    """(tokens, merges, specials) of a tiny byte-level BPE vocabulary."""
    toks = [B2U[b] for b in range(256)]
    for a, b in BPE_MERGES:
        if a + b not in toks:
            toks.append(a + b)
    return toks, ["%s %s" % m for m in BPE_MERGES], list(specials)


# ---- models --------------------------------------------------------------
def model_tensors(dim, ffn, n_layers, n_heads, n_kv, vocab, dt_mat,
                  tied=True, bias=False, experts=0, exp_ffn=0, dt_vec=DT_F32,
                  dt_emb=None, dense=True, qk_norm=False):
    """GGUF-named tensors of a tiny llama/qwen2/qwen3(moe) model."""
    hd = dim // n_heads
    kvd = n_kv * hd
    dt_emb = dt_mat if dt_emb is None else dt_emb
    T = []

    def mat(name, rows, cols, dt):
        T.append((name, [cols, rows], dt, encode(rand_f32(rows * cols), dt)))

    def vec(name, n, base=1.0):
        T.append((name, [n], dt_vec,
                  encode([base + x for x in rand_f32(n, 0.01)], dt_vec)))

    mat("token_embd.weight", vocab, dim, dt_emb)
    vec("output_norm.weight", dim)
    if not tied:
        mat("output.weight", vocab, dim, dt_emb)
    for l in range(n_layers):
        p = "blk.%d." % l
        vec(p + "attn_norm.weight", dim)
        mat(p + "attn_q.weight", dim, dim, dt_mat)
        mat(p + "attn_k.weight", kvd, dim, dt_mat)
        mat(p + "attn_v.weight", kvd, dim, dt_mat)
        mat(p + "attn_output.weight", dim, dim, dt_mat)
        if bias:
            vec(p + "attn_q.bias", dim, 0.0)
            vec(p + "attn_k.bias", kvd, 0.0)
            vec(p + "attn_v.bias", kvd, 0.0)
        if qk_norm:
            vec(p + "attn_q_norm.weight", hd)
            vec(p + "attn_k_norm.weight", hd)
        vec(p + "ffn_norm.weight", dim)
        if dense:
            mat(p + "ffn_gate.weight", ffn, dim, dt_mat)
            mat(p + "ffn_up.weight", ffn, dim, dt_mat)
            mat(p + "ffn_down.weight", dim, ffn, dt_mat)
        if experts:
            T.append((p + "ffn_gate_inp.weight", [dim, experts], DT_F32,
                      f32s(rand_f32(dim * experts))))
            for nm, r, c in (("ffn_gate_exps", exp_ffn, dim),
                             ("ffn_up_exps", exp_ffn, dim),
                             ("ffn_down_exps", dim, exp_ffn)):
                T.append((p + nm + ".weight", [c, r, experts], dt_mat,
                          encode(rand_f32(r * c * experts), dt_mat)))
    return T


def llama_kvs(arch, dim, ffn, n_layers, n_heads, n_kv, ctx, extra=()):
    a = arch
    out = [kv("general.architecture", KV_STR, a),
           kv("general.name", KV_STR, "fuzz-seed"),
           kv(a + ".block_count", KV_U32, n_layers),
           kv(a + ".embedding_length", KV_U32, dim),
           kv(a + ".feed_forward_length", KV_U32, ffn),
           kv(a + ".attention.head_count", KV_U32, n_heads),
           kv(a + ".attention.head_count_kv", KV_U32, n_kv),
           kv(a + ".context_length", KV_U32, ctx),
           kv(a + ".rope.freq_base", KV_F32, 10000.0),
           kv(a + ".attention.layer_norm_rms_epsilon", KV_F32, 1e-5)]
    return out + list(extra)


def spm_kvs(byte_tokens=False):
    toks, scores, types = spm_vocab(byte_tokens)
    return [kv("tokenizer.ggml.model", KV_STR, "llama"),
            kv("tokenizer.ggml.tokens", KV_ARR, toks, KV_STR),
            kv("tokenizer.ggml.scores", KV_ARR, scores, KV_F32),
            kv("tokenizer.ggml.token_type", KV_ARR, types, KV_I32),
            kv("tokenizer.ggml.bos_token_id", KV_U32, 1),
            kv("tokenizer.ggml.eos_token_id", KV_U32, 2),
            kv("tokenizer.ggml.unknown_token_id", KV_U32, 0),
            kv("tokenizer.ggml.add_bos_token", KV_BOOL, 1),
            kv("tokenizer.ggml.add_space_prefix", KV_BOOL, 1),
            kv("tokenizer.chat_template", KV_STR,
               "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
               "{{ m['content'] }}<|im_end|>\n{% endfor %}")], len(toks)


def bpe_kvs(pre="qwen2"):
    toks, merges, specials = bpe_vocab()
    all_toks = toks + specials
    types = [1] * len(toks) + [3] * len(specials)
    return [kv("tokenizer.ggml.model", KV_STR, "gpt2"),
            kv("tokenizer.ggml.pre", KV_STR, pre),
            kv("tokenizer.ggml.tokens", KV_ARR, all_toks, KV_STR),
            kv("tokenizer.ggml.token_type", KV_ARR, types, KV_I32),
            kv("tokenizer.ggml.merges", KV_ARR, merges, KV_STR),
            kv("tokenizer.ggml.bos_token_id", KV_U32, len(toks)),
            kv("tokenizer.ggml.eos_token_id", KV_U32, len(toks)),
            kv("tokenizer.ggml.padding_token_id", KV_U32, len(toks)),
            kv("tokenizer.ggml.add_bos_token", KV_BOOL, 0)], len(all_toks)


def gguf_seeds():
    """Returns {name: bytes} of the GGUF seeds (also used for .cflow)."""
    out = {}
    tk, nv = spm_kvs()
    # dense llama, f32, tied
    out["llama-f32.gguf"] = gguf(
        llama_kvs("llama", 32, 64, 1, 2, 1, 64) + tk,
        model_tensors(32, 64, 1, 2, 1, nv, DT_F32))
    # quantised matrices, untied head, two layers
    out["llama-q8_0.gguf"] = gguf(
        llama_kvs("llama", 32, 64, 2, 4, 2, 64) + tk,
        model_tensors(32, 64, 2, 4, 2, nv, DT_Q8_0, tied=False,
                      dt_emb=DT_F16))
    out["llama-q4_0.gguf"] = gguf(
        llama_kvs("llama", 32, 32, 1, 2, 2, 32) + tk,
        model_tensors(32, 32, 1, 2, 2, nv, DT_Q4_0, dt_emb=DT_Q8_0))
    # Llama-3 style RoPE scaling keys
    out["llama-rope3.gguf"] = gguf(
        llama_kvs("llama", 32, 64, 1, 2, 1, 64, [
            kv("llama.rope.scaling.type", KV_STR, "llama3"),
            kv("llama.rope.scaling.factor", KV_F32, 8.0),
            kv("llama.rope.scaling.original_context_length", KV_U32, 32)]) +
        tk, model_tensors(32, 64, 1, 2, 1, nv, DT_F16))
    # Mixtral-style MoE (experts only) and a dense + experts model
    out["moe-q8_0.gguf"] = gguf(
        llama_kvs("llama", 32, 32, 1, 2, 1, 64, [
            kv("llama.expert_count", KV_U32, 4),
            kv("llama.expert_used_count", KV_U32, 2)]) + tk,
        model_tensors(32, 32, 1, 2, 1, nv, DT_Q8_0, experts=4, exp_ffn=32,
                      dense=False))
    # qwen2 with Q/K/V biases and a byte-level BPE vocabulary (f16)
    tb, nb = bpe_kvs()
    out["qwen2-f16.gguf"] = gguf(
        llama_kvs("qwen2", 32, 64, 1, 2, 1, 64) + tb,
        model_tensors(32, 64, 1, 2, 1, nb, DT_F16, bias=True))
    # version 2, larger alignment, vocabulary only (no tensors)
    out["vocab-spm-v2.gguf"] = gguf(
        [kv("general.architecture", KV_STR, "llama"),
         kv("general.alignment", KV_U32, 64)] + spm_kvs(True)[0], [],
        version=2, align=64)
    out["vocab-bpe.gguf"] = gguf(bpe_kvs("gpt-2")[0], [])
    # every scalar and array type in the metadata
    out["kv-types.gguf"] = gguf(kv_type_blobs(),
                                [("t", [32], DT_Q4_0,
                                  q4_0(rand_f32(32)))])
    # qwen3moe: per-head Q/K norms, experts only, routing without
    # renormalisation; from its own generator state so that adding it
    # left every other seed as it was
    state = rng.getstate()
    rng.seed(3)
    out["qwen3moe-q8_0.gguf"] = gguf(
        llama_kvs("qwen3moe", 32, 32, 1, 2, 1, 64, [
            kv("qwen3moe.expert_count", KV_U32, 4),
            kv("qwen3moe.expert_used_count", KV_U32, 2),
            kv("qwen3moe.expert_feed_forward_length", KV_U32, 32),
            kv("qwen3moe.expert_weights_norm", KV_BOOL, 0)]) + tk,
        model_tensors(32, 32, 1, 2, 1, nv, DT_Q8_0, experts=4, exp_ffn=32,
                      dense=False, qk_norm=True))
    rng.setstate(state)
    quant_seeds(out, tk, nv)
    return out


def quant_seeds(out, tk, nv):
    """GGUFs of the GGML block types (issue 41), from their own generator
    so that the older seeds keep their bytes: a d-256 llama whose matrices
    take every 256-column type (one 32-wide head, key_length 32, so that
    attn_output's and ffn_down's 32 columns take 32-column types), a d-32
    llama of the 32-column types and BF16, and MXFP4 experts."""
    r = random.Random(41)

    def mat(name, rows, cols, dt):
        if dt == DT_BF16:
            return (name, [cols, rows], dt, bf16s([r.uniform(-0.1, 0.1)
                                                   for _ in range(rows * cols)]))
        return (name, [cols, rows], dt, blocks(rows * cols, dt, r))

    def vec(name, n):
        return (name, [n], DT_F32, f32s([1.0 + r.uniform(-0.01, 0.01)
                                          for _ in range(n)]))

    ext = [kv("llama.attention.key_length", KV_U32, 32),
           kv("llama.attention.value_length", KV_U32, 32),
           kv("llama.rope.dimension_count", KV_U32, 32)]
    out["llama-kquants.gguf"] = gguf(
        llama_kvs("llama", 256, 32, 1, 1, 1, 64, ext) + tk,
        [mat("token_embd.weight", nv, 256, DT_Q4_1), vec("output_norm.weight", 256),
         mat("output.weight", nv, 256, DT_Q6_K), vec("blk.0.attn_norm.weight", 256),
         mat("blk.0.attn_q.weight", 32, 256, DT_Q4_K),
         mat("blk.0.attn_k.weight", 32, 256, DT_Q5_K),
         mat("blk.0.attn_v.weight", 32, 256, DT_Q3_K),
         mat("blk.0.attn_output.weight", 256, 32, DT_Q5_0),
         vec("blk.0.ffn_norm.weight", 256),
         mat("blk.0.ffn_gate.weight", 32, 256, DT_Q2_K),
         mat("blk.0.ffn_up.weight", 32, 256, DT_IQ4_XS),
         mat("blk.0.ffn_down.weight", 256, 32, DT_IQ4_NL)])
    out["llama-legacy.gguf"] = gguf(
        llama_kvs("llama", 32, 64, 1, 2, 1, 64) + tk,
        [mat("token_embd.weight", nv, 32, DT_BF16), vec("output_norm.weight", 32),
         mat("output.weight", nv, 32, DT_Q5_1), vec("blk.0.attn_norm.weight", 32),
         mat("blk.0.attn_q.weight", 32, 32, DT_Q4_1),
         mat("blk.0.attn_k.weight", 16, 32, DT_Q5_0),
         mat("blk.0.attn_v.weight", 16, 32, DT_IQ4_NL),
         mat("blk.0.attn_output.weight", 32, 32, DT_MXFP4),
         vec("blk.0.ffn_norm.weight", 32),
         mat("blk.0.ffn_gate.weight", 64, 32, DT_Q5_1),
         mat("blk.0.ffn_up.weight", 64, 32, DT_BF16),
         mat("blk.0.ffn_down.weight", 32, 64, DT_Q4_1)])
    T = [mat("token_embd.weight", nv, 32, DT_Q5_0),
         vec("output_norm.weight", 32), vec("blk.0.attn_norm.weight", 32),
         mat("blk.0.attn_q.weight", 32, 32, DT_Q5_0),
         mat("blk.0.attn_k.weight", 16, 32, DT_Q5_0),
         mat("blk.0.attn_v.weight", 16, 32, DT_Q5_0),
         mat("blk.0.attn_output.weight", 32, 32, DT_Q5_0),
         vec("blk.0.ffn_norm.weight", 32),
         ("blk.0.ffn_gate_inp.weight", [32, 4], DT_F32,
          f32s([r.uniform(-0.1, 0.1) for _ in range(128)]))]
    for nm, rows, cols in (("ffn_gate_exps", 32, 32), ("ffn_up_exps", 32, 32),
                           ("ffn_down_exps", 32, 32)):
        T.append(("blk.0." + nm + ".weight", [cols, rows, 4], DT_MXFP4,
                  blocks(rows * cols * 4, DT_MXFP4, r)))
    out["moe-mxfp4.gguf"] = gguf(
        llama_kvs("llama", 32, 32, 1, 2, 1, 64, [
            kv("llama.expert_count", KV_U32, 4),
            kv("llama.expert_used_count", KV_U32, 2)]) + tk, T)
    # experts of a 256-column type (issue 44): the lazily read bank's
    # IQ4_XS gate/up tiles and Q5_1 down tiles (its .vflow in the cflow
    # corpus), K-quant attention; last, so the seeds above keep their
    # bytes
    T = [mat("token_embd.weight", nv, 256, DT_Q6_K),
         vec("output_norm.weight", 256), vec("blk.0.attn_norm.weight", 256),
         mat("blk.0.attn_q.weight", 32, 256, DT_Q3_K),
         mat("blk.0.attn_k.weight", 32, 256, DT_Q2_K),
         mat("blk.0.attn_v.weight", 32, 256, DT_Q4_K),
         mat("blk.0.attn_output.weight", 256, 32, DT_Q4_1),
         vec("blk.0.ffn_norm.weight", 256),
         ("blk.0.ffn_gate_inp.weight", [256, 4], DT_F32,
          f32s([r.uniform(-0.1, 0.1) for _ in range(1024)]))]
    for nm, rows, cols, dt in (("ffn_gate_exps", 32, 256, DT_IQ4_XS),
                               ("ffn_up_exps", 32, 256, DT_IQ4_XS),
                               ("ffn_down_exps", 256, 32, DT_Q5_1)):
        T.append(("blk.0." + nm + ".weight", [cols, rows, 4], dt,
                  blocks(rows * cols * 4, dt, r)))
    out["moe-kquants.gguf"] = gguf(
        llama_kvs("llama", 256, 32, 1, 1, 1, 64, ext + [
            kv("llama.expert_count", KV_U32, 4),
            kv("llama.expert_used_count", KV_U32, 2)]) + tk, T)


def kv_type_blobs():
    return [kv("u8", KV_U8, 7), kv("i8", KV_I8, -7), kv("u16", KV_U16, 700),
            kv("i16", KV_I16, -700), kv("u32", KV_U32, 70000),
            kv("i32", KV_I32, -70000), kv("f32", KV_F32, 1.5),
            kv("bool", KV_BOOL, 1), kv("str", KV_STR, "h\u00e9llo"),
            kv("u64", KV_U64, 1 << 40), kv("i64", KV_I64, -(1 << 40)),
            kv("f64", KV_F64, 2.25),
            kv("arr.str", KV_ARR, ["a", "", "\u2581b"], KV_STR),
            kv("arr.i32", KV_ARR, [1, -2, 3], KV_I32),
            kv("arr.f32", KV_ARR, [0.5, -1.0], KV_F32),
            kv("arr.u8", KV_ARR, [1, 2, 3], KV_U8),
            kv("arr.u64", KV_ARR, [1, 1 << 50], KV_U64),
            kv("arr.empty", KV_ARR, [], KV_I32),
            kv("arr.bool", KV_ARR, [1, 0], KV_BOOL)]


# ---- fmt_kv_parse seeds: u64 count, then the entries ---------------------
def kv_seeds():
    blobs = kv_type_blobs()
    write("kv", "all-types.bin", u64(len(blobs)) + b"".join(blobs))
    tk, _ = spm_kvs()
    write("kv", "tokenizer-spm.bin", u64(len(tk)) + b"".join(tk))
    tb, _ = bpe_kvs()
    write("kv", "tokenizer-bpe.bin", u64(len(tb)) + b"".join(tb))
    one = kv("general.architecture", KV_STR, "llama")
    write("kv", "one.bin", u64(1) + one + b"trailing")
    write("kv", "empty.bin", u64(0))


# ---- llama2.c checkpoints and tokenizer.bin ------------------------------
def l2c_tokenizer(words, max_len=None):
    """llama2.c tokenizer.bin: <unk>, BOS, EOS, 256 byte tokens, words."""
    toks = [(0.0, b"<unk>"), (0.0, b"\n<s>\n"), (0.0, b"\n</s>\n")]
    toks += [(0.0, ("<0x%02X>" % b).encode()) for b in range(256)]
    toks += [(-float(i), w.encode()) for i, w in enumerate(words)]
    ml = max_len or max(len(t) for _, t in toks)
    out = bytearray(i32(ml))
    for s, t in toks:
        out += f32(s) + i32(len(t)) + t
    return bytes(out), len(toks)


L2C_WORDS = ["a", "e", "o", "t", "h", " ", " the", " a", "he", "ll", "llo",
             " hello", " once", " upon", " time", " there", " was", "."]


def l2c_checkpoint(dim, hidden, n_layers, n_heads, n_kv, vocab, seq,
                   shared=True):
    hs = dim // n_heads
    kvd = dim * n_kv // n_heads
    hdr = struct.pack("<7i", dim, hidden, n_layers, n_heads, n_kv,
                      vocab if shared else -vocab, seq)
    n = vocab * dim                      # token embedding
    n += n_layers * dim                  # rms_att
    n += n_layers * dim * dim * 2        # wq, wo
    n += n_layers * kvd * dim * 2        # wk, wv
    n += n_layers * dim                  # rms_ffn
    n += n_layers * hidden * dim * 3     # w1, w2, w3
    n += dim                             # rms_final
    n += seq * hs                        # freq_cis real + imag
    if not shared:
        n += vocab * dim
    return hdr + f32s(rand_f32(n))


def llama2c_seeds():
    tok, nv = l2c_tokenizer(L2C_WORDS)
    out = {}
    out["shared.a"] = archive([
        ("model.bin", l2c_checkpoint(16, 32, 1, 2, 1, nv, 16)),
        ("tokenizer.bin", tok)])
    out["unshared-gqa.a"] = archive([
        ("model.bin", l2c_checkpoint(16, 24, 2, 4, 2, nv, 8, shared=False)),
        ("tokenizer.bin", tok)])
    for k, v in out.items():
        write("llama2c", k, v)
    return tok, nv


# ---- Hugging Face directories --------------------------------------------
def safetensors(tensors, meta=None):
    """tensors: list of (name, shape, dtype string, bytes)."""
    hdr = {}
    data = bytearray()
    for name, shape, dt, blob in tensors:
        hdr[name] = {"dtype": dt, "shape": shape,
                     "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    if meta:
        hdr["__metadata__"] = meta
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    return u64(len(h)) + h + bytes(data)


HF_DT = {"F32": DT_F32, "F16": DT_F16, "BF16": DT_BF16}


def hf_tensors(dim, ffn, n_layers, n_heads, n_kv, vocab, dt, tied=True,
               bias=False, pipeline_experts=0):
    hd = dim // n_heads
    kvd = n_kv * hd
    code = HF_DT[dt]
    T = []

    def mat(name, rows, cols):
        T.append((name, [rows, cols], dt, encode(rand_f32(rows * cols), code)))

    def vec(name, n, base=1.0):
        T.append((name, [n], dt,
                  encode([base + x for x in rand_f32(n, 0.01)], code)))

    mat("model.embed_tokens.weight", vocab, dim)
    vec("model.norm.weight", dim)
    if not tied:
        mat("lm_head.weight", vocab, dim)
    for l in range(n_layers):
        p = "model.layers.%d." % l
        vec(p + "input_layernorm.weight", dim)
        mat(p + "self_attn.q_proj.weight", dim, dim)
        mat(p + "self_attn.k_proj.weight", kvd, dim)
        mat(p + "self_attn.v_proj.weight", kvd, dim)
        mat(p + "self_attn.o_proj.weight", dim, dim)
        if bias:
            vec(p + "self_attn.q_proj.bias", dim, 0.0)
            vec(p + "self_attn.k_proj.bias", kvd, 0.0)
            vec(p + "self_attn.v_proj.bias", kvd, 0.0)
        vec(p + "post_attention_layernorm.weight", dim)
        mat(p + "mlp.gate_proj.weight", ffn, dim)
        mat(p + "mlp.up_proj.weight", ffn, dim)
        mat(p + "mlp.down_proj.weight", dim, ffn)
        if pipeline_experts:
            e = pipeline_experts
            vec(p + "moe_norm.weight", dim)
            mat(p + "moe.router.weight", e, dim)
            for nm, r, c in (("gate_proj", ffn, dim), ("up_proj", ffn, dim),
                             ("down_proj", dim, ffn)):
                T.append((p + "moe.experts.%s.weight" % nm, [e, r, c], dt,
                          encode(rand_f32(e * r * c), code)))
    return T


def hf_config(arch, dim, ffn, n_layers, n_heads, n_kv, vocab, **extra):
    c = {"architectures": [arch], "hidden_size": dim,
         "intermediate_size": ffn, "num_hidden_layers": n_layers,
         "num_attention_heads": n_heads, "num_key_value_heads": n_kv,
         "max_position_embeddings": 64, "vocab_size": vocab,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
         "tie_word_embeddings": True, "torch_dtype": "float32"}
    c.update(extra)
    return json.dumps(c, indent=1).encode()


def tokenizer_json_bpe(pre="qwen2", added=True, ignore_merges=False):
    toks, merges, specials = bpe_vocab()
    vocab = {t: i for i, t in enumerate(toks)}
    re_qwen2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
                r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    re_custom = r"\p{N}{1,2}|[A-Za-z]+| ?[^\sA-Za-z0-9]+|\s+"
    pt = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": re_qwen2 if pre == "qwen2"
                                      else re_custom},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
         "use_regex": False}]}
    j = {"version": "1.0",
         "added_tokens": [{"id": len(toks) + i, "content": s, "single_word":
                           False, "lstrip": False, "rstrip": False,
                           "normalized": False, "special": True}
                          for i, s in enumerate(specials)] if added else [],
         "normalizer": None, "pre_tokenizer": pt,
         "decoder": {"type": "ByteLevel"},
         "model": {"type": "BPE", "dropout": None, "unk_token": None,
                   "byte_fallback": False, "ignore_merges": ignore_merges,
                   "vocab": vocab,
                   "merges": merges if pre == "qwen2"
                   else [m.split(" ") for m in merges]}}
    return json.dumps(j, ensure_ascii=False).encode()


def tokenizer_json_spm():
    toks, scores, types = spm_vocab(True)
    vocab = {t: i for i, t in enumerate(toks)}
    merges = []
    for t in toks:
        if types[toks.index(t)] != 1 or len(t) < 2:
            continue
        for k in range(1, len(t)):
            if t[:k] in vocab and t[k:] in vocab:
                merges.append("%s %s" % (t[:k], t[k:]))
                break
    j = {"version": "1.0",
         "added_tokens": [{"id": i, "content": toks[i], "special": True}
                          for i in range(3)],
         "normalizer": {"type": "Sequence", "normalizers": [
             {"type": "Prepend", "prepend": SPM},
             {"type": "Replace", "pattern": {"String": " "},
              "content": SPM}]},
         "pre_tokenizer": None,
         "decoder": {"type": "Sequence", "decoders": [
             {"type": "Replace", "pattern": {"String": SPM}, "content": " "},
             {"type": "ByteFallback"}, {"type": "Fuse"},
             {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
         "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True,
                   "fuse_unk": True, "vocab": vocab, "merges": merges}}
    return json.dumps(j, ensure_ascii=False).encode()


def tokenizer_config(cls=None, template=True):
    c = {"add_bos_token": False, "add_eos_token": False,
         "bos_token": None, "eos_token": "<|im_end|>",
         "pad_token": "<|endoftext|>", "unk_token": None,
         "added_tokens_decoder": {"259": {"content": "<|endoftext|>",
                                          "special": True}}}
    if cls:
        c["tokenizer_class"] = cls
    if template:
        c["chat_template"] = ("{% for m in messages %}<|im_start|>"
                              "{{ m['role'] }}\n{{ m['content'] }}<|im_end|>"
                              "\n{% endfor %}")
    return json.dumps(c).encode()


def vocab_merges():
    toks, merges, specials = bpe_vocab()
    vj = json.dumps({t: i for i, t in enumerate(toks + specials)},
                    ensure_ascii=False).encode()
    mt = ("#version: 0.2\n" + "\n".join(merges) + "\n").encode()
    return vj, mt


def hf_seeds():
    _, _, nspecial = bpe_vocab()
    nb = len(bpe_vocab()[0]) + len(nspecial)
    tj = tokenizer_json_bpe()
    out = {}
    out["llama-f32.a"] = archive([
        ("config.json", hf_config("LlamaForCausalLM", 16, 32, 1, 2, 1, nb)),
        ("model.safetensors", safetensors(
            hf_tensors(16, 32, 1, 2, 1, nb, "F32"), {"format": "pt"})),
        ("tokenizer.json", tj)])
    out["qwen2-bf16-bias.a"] = archive([
        ("config.json", hf_config("Qwen2ForCausalLM", 16, 32, 1, 2, 2, nb,
                                  tie_word_embeddings=False,
                                  use_sliding_window=False)),
        ("model.safetensors", safetensors(
            hf_tensors(16, 32, 1, 2, 2, nb, "BF16", tied=False, bias=True))),
        ("vocab.json", vocab_merges()[0]), ("merges.txt", vocab_merges()[1]),
        ("tokenizer_config.json", tokenizer_config("Qwen2Tokenizer"))])
    # sharded: the index maps tensors to two files
    T = hf_tensors(16, 32, 1, 2, 1, nb, "F16")
    half = len(T) // 2
    names = ["model-00001-of-00002.safetensors",
             "model-00002-of-00002.safetensors"]
    wm = {t[0]: names[0] for t in T[:half]}
    wm.update({t[0]: names[1] for t in T[half:]})
    out["mistral-sharded-f16.a"] = archive([
        ("config.json", hf_config("MistralForCausalLM", 16, 32, 1, 2, 1, nb,
                                  sliding_window=32,
                                  rope_scaling={"rope_type": "llama3",
                                                "factor": 8.0,
                                                "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0,
                                                "original_max_position_embeddings": 32})),
        ("model.safetensors.index.json",
         json.dumps({"metadata": {}, "weight_map": wm}).encode()),
        (names[0], safetensors(T[:half])), (names[1], safetensors(T[half:])),
        ("tokenizer.json", tj)])
    # our own pipeline-native MoE export
    out["pipeline-moe.a"] = archive([
        ("config.json", hf_config("CflowPipelineForCausalLM", 16, 32, 1, 2, 1,
                                  nb, cflow_arch="arch2_4_combined",
                                  num_experts=2, num_experts_per_tok=1,
                                  moe_intermediate_size=32, dense_delay=0,
                                  expert_delay=0, combine_style=0)),
        ("model.safetensors", safetensors(
            hf_tensors(16, 32, 1, 2, 1, nb, "F32", pipeline_experts=2))),
        ("tokenizer.json", tj)])
    for k, v in out.items():
        write("hf", k, v)
    return out


# ---- tokenizer files (fmt_vocab_load) -------------------------------------
def vocab_seeds(l2c_tok):
    write("vocab", "tokenizer.bin", l2c_tok)
    small, _ = l2c_tokenizer([" x"], max_len=8)
    write("vocab", "tokenizer-small.bin", small)
    write("vocab", "tokenizer-bpe.json", tokenizer_json_bpe())
    write("vocab", "tokenizer-custom-regex.json",
          tokenizer_json_bpe(pre="custom", added=False, ignore_merges=True))
    write("vocab", "tokenizer-spm.json", tokenizer_json_spm())
    vj, mt = vocab_merges()
    write("vocab", "vocab-merges.a", archive([
        ("vocab.json", vj), ("merges.txt", mt)]))
    write("vocab", "vocab-merges-config.a", archive([
        ("vocab.json", vj), ("merges.txt", mt),
        ("tokenizer_config.json", tokenizer_config("GPT2Tokenizer", False)),
        ("chat_template.jinja", b"{{ messages[0]['content'] }}")]))
    write("vocab", "dir-tokenizer-json.a", archive([
        ("tokenizer.json", tokenizer_json_spm()),
        ("tokenizer_config.json", tokenizer_config())]))


# ---- tokenizer encode/decode: byte 0 picks the tokenizer and flags --------
TOK_TEXTS = [
    b"Hello world",
    b" Hello  world\n\n  hello\tthe end. ",
    "Once upon a time, \u00e9l\u00e8ve na\u00efve caf\u00e9 \u2014 "
    "\u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \U0001F600\U0001F468\u200d"
    "\U0001F469".encode("utf-8", "surrogatepass"),
    b"<s>hi</s> <|im_start|>user\nhey<|im_end|><|endoftext|>",
    b"12345 3.14159 1,000,000 0x1F '''s 've 'LL",
    b"\xff\xfe bad \xc3 utf8 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf",
    b"    \n\n\n\t\t  \r\n   ",
    b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    b"\x00\x01\x02 nul and controls \x7f",
]


def tok_seeds():
    for i, t in enumerate(TOK_TEXTS):
        for mode in range(3):
            flags = (i % 4) << 2   # add_special, parse_special
            write("tok", "text%02d-mode%d.txt" % (i, mode),
                  bytes([mode | flags]) + t)


# ---- fuzz_roundtrip: a vocabulary of the input's own, then the text -------
def rt_flags(bpe=0, add=0, parse=0, all_bytes=1, bit4=0, max_mode=0):
    return bytes([bpe | add << 1 | parse << 2 | all_bytes << 3 | bit4 << 4 |
                  max_mode << 5])


RT_SEEDS = [
    # SentencePiece without a piece for the space: 3 byte tokens a space
    ("spm-no-space", rt_flags(bit4=1, add=1), [b"a", b"b", b"he", b"ll", b"o"],
     b"hello world  a b    "),
    ("spm-space", rt_flags(bit4=1, add=1), [b" ", b"a", b" hello", b"lo"],
     b"hello  a   lo"),
    ("spm-no-bytes", rt_flags(all_bytes=0, add=1), [b"a", b" a", b"the"],
     "the a \u00e9t\u00e9 \U0001f600".encode()),
    ("spm-control", rt_flags(parse=1, bit4=1), [b"!<|im_end|>", b"?<tool>", b"h", b"i"],
     b"hi<|im_end|> <tool>hi"),
    ("spm-max-less", rt_flags(bit4=1, add=1, max_mode=2), [b"a", b" a"], b"a a a a a"),
    ("bpe-words", rt_flags(bpe=1), [b"he", b"ll", b"hell", b"hello", b" w", b" wo"],
     b"hello world, hello!"),
    ("bpe-invalid-utf8", rt_flags(bpe=1, add=1), [b"ab"], b"ab\xff\xfe\xc0\xaf ab"),
    ("bpe-no-bytes", rt_flags(bpe=1, all_bytes=0), [b"a", b"b", b"ab"], b"ab ba\x01"),
    ("bpe-regex", rt_flags(bpe=1, bit4=1), [b"\\s+(?=\\s*x)|\\S+|\\s+", b"ab"],
     b"ab          x  1"),
    ("bpe-regex-backtracks", rt_flags(bpe=1, bit4=1), [b"(\\s+)+$|\\S+", b"1"],
     b" " * 40 + b"1"),
    ("bpe-max-len8", rt_flags(bpe=1, max_mode=3), [b"a"], b"a " * 64),
    ("bpe-max-equal", rt_flags(bpe=1, add=1, max_mode=1), [b"x", b"xx"], b"xxx xx x"),
]


def roundtrip_seeds():
    for name, flags, toks, text in RT_SEEDS:
        write("roundtrip", name + ".txt", flags + b"\n".join(toks) + b"\n\n" + text)


# ---- .cflow: convert some of the sources with the real converter ----------
def cflow_seeds(cflow, ggufs, l2c):
    tmp = tempfile.mkdtemp(prefix="cflow-seeds-")
    d = os.path.join(CORPUS, "cflow")
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    jobs = [("llama-f32.gguf", None, "llama-q4_0.cflow", "q4_0"),
            ("llama-q8_0.gguf", None, "llama-q8_0.cflow", None),
            ("qwen2-f16.gguf", None, "qwen2-f16.cflow", None),
            ("llama-rope3.gguf", None, "llama-rope3-f32.cflow", "f32"),
            ("moe-q8_0.gguf", None, "moe-q8_0.cflow", None),
            ("l2c", None, "llama2c-q8_0.cflow", "q8_0"),
            ("llama-q4_0.gguf", None, "llama-q4_0.vflow", None),
            ("moe-q8_0.gguf", None, "moe-q4_0.vflow", "q4_0"),
            ("qwen3moe-q8_0.gguf", None, "qwen3moe-q8_0.cflow", None),
            ("llama-kquants.gguf", None, "llama-kquants.cflow", None),
            ("llama-legacy.gguf", None, "llama-legacy.cflow", None),
            ("moe-mxfp4.gguf", None, "moe-mxfp4.vflow", None),
            ("moe-kquants.gguf", None, "moe-kquants.vflow", None),
            ("moe-kquants.gguf", None, "moe-kquants.cflow", None),
            ("llama-f32.gguf", None, "llama-q4_k_m.cflow", "q4_k_m")]
    for src, _, name, q in jobs:
        if src == "l2c":
            mp = os.path.join(tmp, "model.bin")
            tp = os.path.join(tmp, "tokenizer.bin")
            with open(mp, "wb") as f:
                f.write(l2c[0])
            with open(tp, "wb") as f:
                f.write(l2c[1])
            args = [cflow, "convert", "--tokenizer", tp]
        else:
            mp = os.path.join(tmp, src)
            with open(mp, "wb") as f:
                f.write(ggufs[src])
            args = [cflow, "convert"]
        if q:
            args += ["-q", q]
        if name.endswith(".vflow"):
            args += ["--vflow"]
        outp = os.path.join(d, name)
        r = subprocess.run(args + [mp, outp], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("gen_seeds: %s failed: %s" % (" ".join(args), r.stderr))
        sz = os.path.getsize(outp)
        if sz > 100 * 1024:
            sys.exit("gen_seeds: %s is %d bytes (keep seeds under 100 KB)"
                     % (name, sz))
    # the header alone, and the file cut in the middle of its tile table
    with open(os.path.join(d, "llama-q4_0.cflow"), "rb") as f:
        whole = f.read()
    write("cflow", "truncated-header.cflow", whole[:88])
    write("cflow", "truncated-half.cflow", whole[:len(whole) // 2])
    shutil.rmtree(tmp)


def main():
    cflow = None
    args = sys.argv[1:]
    if args[:1] == ["--cflow"] and len(args) == 2:
        cflow = args[1]
    elif args:
        sys.exit("usage: gen_seeds.py [--cflow PATH/TO/cflow]")
    for t in ("kv", "gguf", "llama2c", "hf", "vocab", "tok", "roundtrip"):
        d = os.path.join(CORPUS, t)
        if os.path.isdir(d):
            shutil.rmtree(d)
    kv_seeds()
    ggufs = gguf_seeds()
    for k, v in ggufs.items():
        write("gguf", k, v)
    tok, nv = llama2c_seeds()
    hf_seeds()
    vocab_seeds(tok)
    tok_seeds()
    roundtrip_seeds()
    if cflow:
        l2c = (l2c_checkpoint(32, 64, 1, 2, 1, nv, 32), tok)
        cflow_seeds(cflow, ggufs, l2c)
    big = [(os.path.join(r, f), os.path.getsize(os.path.join(r, f)))
           for r, _, fs in os.walk(CORPUS) for f in fs]
    for p, s in big:
        if s > 100 * 1024:
            sys.exit("gen_seeds: %s is %d bytes" % (p, s))
    print("gen_seeds: %d seeds, %d bytes" % (len(big), sum(s for _, s in big)))


if __name__ == "__main__":
    main()
