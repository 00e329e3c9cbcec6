#!/usr/bin/env python3
"""make_moe.py -- tiny MoE GGUF files and a numpy reference of their forward
pass (tests/e2e/test_moe.c checks cflow against it).

    python3 tests/data/moe/make_moe.py

writes, next to this script:
  qwen3moe-tiny.gguf   arch "qwen3moe": per-head RMSNorm of Q and K
                       (attn_q_norm / attn_k_norm) before split-half RoPE,
                       head_dim (key_length 24) != dim / heads, GQA 4/2,
                       8 experts top-2 with Qwen3-MoE routing: softmax over
                       all experts, top-k, renormalised (norm_topk_prob)
  qwen3moe-nonorm.gguf the same weights, expert_weights_norm = false:
                       the top-k weights are the all-expert softmax as is
  qwen3-tiny.gguf      arch "qwen3": the same attention (Q/K norms) with a
                       dense SwiGLU FFN of 96 instead of experts
  qwen3-tiny-hf/       a Hugging Face Qwen3ForCausalLM directory (config.json,
                       model.safetensors, tokenizer.json; self_attn.q_norm /
                       k_norm), its own weights over the fuzz seeds' byte-
                       level BPE vocabulary
  qwen3moe-tiny-hf/    qwen3moe-tiny's weights as a Hugging Face
                       Qwen3MoeForCausalLM directory (mlp.gate router, one
                       tensor per expert, norm_topk_prob true) with the
                       same vocabulary as tokenizer.json: its reference is
                       qwen3moe-tiny's
  mixtral-tiny.gguf    arch "llama" Mixtral-style: experts replace the FFN,
                       adjacent-pair RoPE, routing softmax over the top-k
                       logits (HF MixtralSparseMoeBlock)
  reference.json       per model: the prompt token ids, the logits after
                       each prompt token (float64 numpy forward pass of the
                       same f32 weights), and 16 greedy tokens after it

Weights come from a fixed-seed generator; all tensors are F32 so the
reference and cflow read the same numbers.  The GGUF writer is the fuzz
seed generator's (tests/fuzz/gen_seeds.py); the vocabulary is its small
SentencePiece one with byte tokens (llama.cpp's tokenizer needs them).

llamacpp.txt holds llama.cpp's greedy ids on these very files (test_moe
compares them; llama.cpp is not built in CI).  They were made with the
llama.cpp build and greedy_ids program of tests/data/llamacpp/README.md
(unslothai/llama.cpp d32676d77, CPU Release build; llama.cpp's
examples/simple with the ids printed: f16 KV cache, greedy sampler):

    for m in qwen3moe-tiny qwen3-tiny mixtral-tiny qwen3moe-nonorm; do
        greedy_ids -m tests/data/moe/$m.gguf -n 24 "once upon a time"
    done

sha256 of the files llama.cpp ran: qwen3moe-tiny 1652a96c..., qwen3-tiny
621ec731..., mixtral-tiny 6332c881..., qwen3moe-nonorm 96c50658....
llama.cpp builds qwen3moe with renormalised routing whatever
expert_weights_norm says, so on qwen3moe-nonorm it prints qwen3moe-tiny's
ids; cflow follows the flag (the numpy reference checks it).
"""
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "fuzz"))
import gen_seeds as G  # noqa: E402

DIM, N_LAYERS, N_HEADS, N_KV, HEAD_DIM = 64, 2, 4, 2, 24
N_EXP, TOP_K, EXP_FFN, CTX, THETA, EPS = 8, 2, 16, 128, 10000.0, 1e-6
PROMPT = [1, 20, 21, 5, 33, 9, 17, 26]
N_GEN = 16


DENSE_FFN = 96


def build(seed, qk_norm, dense=False, vocab=None):
    rng = np.random.default_rng(seed)
    # byte tokens too: llama.cpp's SentencePiece tokenizer needs them
    toks, scores, types = G.spm_vocab(True)
    V = vocab or len(toks)
    qd, kvd = N_HEADS * HEAD_DIM, N_KV * HEAD_DIM
    W = {}

    def m(name, rows, cols, sd=0.08):
        W[name] = (rng.standard_normal((rows, cols)) * sd).astype(np.float32)

    def v(name, n, base=1.0, sd=0.1):
        W[name] = (base + rng.standard_normal(n) * sd).astype(np.float32)

    m("token_embd.weight", V, DIM, 0.5)
    v("output_norm.weight", DIM)
    m("output.weight", V, DIM, 0.15)
    for l in range(N_LAYERS):
        p = "blk.%d." % l
        v(p + "attn_norm.weight", DIM)
        m(p + "attn_q.weight", qd, DIM)
        m(p + "attn_k.weight", kvd, DIM)
        m(p + "attn_v.weight", kvd, DIM)
        m(p + "attn_output.weight", DIM, qd)
        if qk_norm:
            v(p + "attn_q_norm.weight", HEAD_DIM, 1.0, 0.3)
            v(p + "attn_k_norm.weight", HEAD_DIM, 1.0, 0.3)
        v(p + "ffn_norm.weight", DIM)
        if dense:
            m(p + "ffn_gate.weight", DENSE_FFN, DIM, 0.1)
            m(p + "ffn_up.weight", DENSE_FFN, DIM, 0.1)
            m(p + "ffn_down.weight", DIM, DENSE_FFN, 0.1)
            continue
        m(p + "ffn_gate_inp.weight", N_EXP, DIM, 0.5)
        W[p + "ffn_gate_exps.weight"] = (rng.standard_normal(
            (N_EXP, EXP_FFN, DIM)) * 0.1).astype(np.float32)
        W[p + "ffn_up_exps.weight"] = (rng.standard_normal(
            (N_EXP, EXP_FFN, DIM)) * 0.1).astype(np.float32)
        W[p + "ffn_down_exps.weight"] = (rng.standard_normal(
            (N_EXP, DIM, EXP_FFN)) * 0.1).astype(np.float32)
    return W, V


def gguf_bytes(arch, W, extra_kvs, dense=False):
    tk, nv = G.spm_kvs(True)
    moe = [] if dense else [
        G.kv(arch + ".expert_count", G.KV_U32, N_EXP),
        G.kv(arch + ".expert_used_count", G.KV_U32, TOP_K),
        G.kv(arch + ".expert_feed_forward_length", G.KV_U32, EXP_FFN)]
    kvs = G.llama_kvs(arch, DIM, DENSE_FFN if dense else EXP_FFN, N_LAYERS,
                      N_HEADS, N_KV, CTX, moe + [
        G.kv(arch + ".attention.key_length", G.KV_U32, HEAD_DIM),
        G.kv(arch + ".attention.value_length", G.KV_U32, HEAD_DIM),
    ] + extra_kvs)
    # the common helper writes eps 1e-5: replace it with ours
    kvs = [k for k in kvs if b"layer_norm_rms_epsilon" not in k]
    kvs.append(G.kv(arch + ".attention.layer_norm_rms_epsilon", G.KV_F32, EPS))
    tensors = []
    for name, a in W.items():
        ne = list(reversed(a.shape))
        tensors.append((name, ne, G.DT_F32, a.astype("<f4").tobytes()))
    return G.gguf(kvs + tk, tensors)


HF_NAMES = [("token_embd.weight", "model.embed_tokens.weight"),
            ("output_norm.weight", "model.norm.weight"),
            ("output.weight", "lm_head.weight"),
            ("attn_norm.weight", "input_layernorm.weight"),
            ("attn_q.weight", "self_attn.q_proj.weight"),
            ("attn_k.weight", "self_attn.k_proj.weight"),
            ("attn_v.weight", "self_attn.v_proj.weight"),
            ("attn_output.weight", "self_attn.o_proj.weight"),
            ("attn_q_norm.weight", "self_attn.q_norm.weight"),
            ("attn_k_norm.weight", "self_attn.k_norm.weight"),
            ("ffn_norm.weight", "post_attention_layernorm.weight"),
            ("ffn_gate.weight", "mlp.gate_proj.weight"),
            ("ffn_up.weight", "mlp.up_proj.weight"),
            ("ffn_down.weight", "mlp.down_proj.weight")]


def write_hf(dirname, W, V, moe=False):
    """A Qwen3ForCausalLM (Qwen3MoeForCausalLM) directory holding W (GGUF
    names) under HF names."""
    os.makedirs(dirname, exist_ok=True)
    T = []
    for name, a in W.items():
        if moe and name.endswith("_exps.weight"):
            l, kind = name.split(".")[1], name.split(".")[2][4:-5]
            for e in range(a.shape[0]):
                T.append(("model.layers.%s.mlp.experts.%d.%s_proj.weight" % (l, e, kind),
                          list(a[e].shape), "F32", a[e].astype("<f4").tobytes()))
            continue
        if moe and name.endswith("ffn_gate_inp.weight"):
            T.append(("model.layers.%s.mlp.gate.weight" % name.split(".")[1],
                      list(a.shape), "F32", a.astype("<f4").tobytes()))
            continue
        hf = None
        for g, h in HF_NAMES:
            if name == g:
                hf = h
            elif name.startswith("blk.") and name.split(".", 2)[2] == g:
                hf = "model.layers.%s.%s" % (name.split(".")[1], h)
        assert hf, name
        T.append((hf, list(a.shape), "F32", a.astype("<f4").tobytes()))
    extra = dict(num_experts=N_EXP, num_experts_per_tok=TOP_K,
                 moe_intermediate_size=EXP_FFN, norm_topk_prob=True,
                 decoder_sparse_step=1, mlp_only_layers=[]) if moe else {}
    cfg = json.loads(G.hf_config("Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM",
                                 DIM, DENSE_FFN, N_LAYERS,
                                 N_HEADS, N_KV, V, head_dim=HEAD_DIM, **extra,
                                 rms_norm_eps=EPS, rope_theta=THETA,
                                 max_position_embeddings=CTX,
                                 tie_word_embeddings=False,
                                 attention_bias=False,
                                 use_sliding_window=False))
    with open(os.path.join(dirname, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    with open(os.path.join(dirname, "model.safetensors"), "wb") as f:
        f.write(G.safetensors(T, {"format": "pt"}))
    with open(os.path.join(dirname, "tokenizer.json"), "wb") as f:
        f.write(G.tokenizer_json_spm() if moe else G.tokenizer_json_bpe())


def rmsnorm(x, w):
    return x / np.sqrt(np.mean(x * x) + EPS) * w


def rope(x, pos, neox):
    """x [heads][HEAD_DIM]: rotate every dimension pair at position pos."""
    half = HEAD_DIM // 2
    inv = THETA ** (-np.arange(half) * 2.0 / HEAD_DIM)
    ang = pos * inv
    c, s = np.cos(ang), np.sin(ang)
    y = x.copy()
    if neox:
        a, b = x[:, :half], x[:, half:]
        y[:, :half] = a * c - b * s
        y[:, half:] = a * s + b * c
    else:
        a, b = x[:, 0::2], x[:, 1::2]
        y[:, 0::2] = a * c - b * s
        y[:, 1::2] = a * s + b * c
    return y


def silu(x):
    return x / (1.0 + np.exp(-x))


class Model:
    def __init__(self, W, qk_norm, neox, routing):
        self.W = {k: v.astype(np.float64) for k, v in W.items()}
        self.qk_norm, self.neox, self.routing = qk_norm, neox, routing
        self.kc = [[] for _ in range(N_LAYERS)]
        self.vc = [[] for _ in range(N_LAYERS)]

    def moe(self, p, h):
        W = self.W
        logits = W[p + "ffn_gate_inp.weight"] @ h
        order = sorted(range(N_EXP), key=lambda e: (-logits[e], e))[:TOP_K]
        if self.routing == "mixtral":      # softmax over the chosen logits
            z = np.exp(logits[order] - logits[order].max())
            w = z / z.sum()
        else:                              # qwen3moe: softmax over all
            z = np.exp(logits - logits.max())
            probs = z / z.sum()
            w = probs[order]
            if self.routing == "qwen3moe":
                w = w / w.sum()
        out = np.zeros(DIM)
        for wj, e in zip(w, order):
            g = W[p + "ffn_gate_exps.weight"][e] @ h
            u = W[p + "ffn_up_exps.weight"][e] @ h
            out += wj * (W[p + "ffn_down_exps.weight"][e] @ (silu(g) * u))
        return out

    def step(self, tok):
        W = self.W
        pos = len(self.kc[0])
        x = W["token_embd.weight"][tok].copy()
        grp = N_HEADS // N_KV
        for l in range(N_LAYERS):
            p = "blk.%d." % l
            h = rmsnorm(x, W[p + "attn_norm.weight"])
            q = (W[p + "attn_q.weight"] @ h).reshape(N_HEADS, HEAD_DIM)
            k = (W[p + "attn_k.weight"] @ h).reshape(N_KV, HEAD_DIM)
            v = (W[p + "attn_v.weight"] @ h).reshape(N_KV, HEAD_DIM)
            if self.qk_norm:
                q = np.stack([rmsnorm(r, W[p + "attn_q_norm.weight"]) for r in q])
                k = np.stack([rmsnorm(r, W[p + "attn_k_norm.weight"]) for r in k])
            q, k = rope(q, pos, self.neox), rope(k, pos, self.neox)
            self.kc[l].append(k)
            self.vc[l].append(v)
            K, Vv = np.stack(self.kc[l]), np.stack(self.vc[l])
            att = np.zeros((N_HEADS, HEAD_DIM))
            for hh in range(N_HEADS):
                kv = hh // grp
                sc = K[:, kv, :] @ q[hh] / np.sqrt(HEAD_DIM)
                a = np.exp(sc - sc.max())
                a /= a.sum()
                att[hh] = a @ Vv[:, kv, :]
            x = x + W[p + "attn_output.weight"] @ att.reshape(-1)
            h = rmsnorm(x, W[p + "ffn_norm.weight"])
            if self.routing == "dense":
                g = W[p + "ffn_gate.weight"] @ h
                u = W[p + "ffn_up.weight"] @ h
                x = x + W[p + "ffn_down.weight"] @ (silu(g) * u)
            else:
                x = x + self.moe(p, h)
        x = rmsnorm(x, W["output_norm.weight"])
        return W["output.weight"] @ x


def reference(W, qk_norm, neox, routing):
    mdl = Model(W, qk_norm, neox, routing)
    logits = [mdl.step(t).tolist() for t in PROMPT]
    gen, last = [], logits[-1]
    for _ in range(N_GEN):
        t = int(np.argmax(last))
        gen.append(t)
        last = mdl.step(t).tolist()
    return {"prompt": PROMPT, "logits": logits, "greedy": gen}


def main():
    out = {}
    Wq, _ = build(31, True)
    jobs = [("qwen3moe-tiny", "qwen3moe", Wq, True, True, "qwen3moe", []),
            ("qwen3moe-nonorm", "qwen3moe", Wq, True, True, "qwen3moe-nonorm",
             [G.kv("qwen3moe.expert_weights_norm", G.KV_BOOL, 0)])]
    Wm, _ = build(47, False)
    jobs.append(("mixtral-tiny", "llama", Wm, False, False, "mixtral", []))
    Wd, _ = build(53, True, dense=True)
    jobs.append(("qwen3-tiny", "qwen3", Wd, True, True, "dense", []))
    toks, merges, specials = G.bpe_vocab()
    Wh, Vh = build(59, True, dense=True, vocab=len(toks) + len(specials))
    write_hf(os.path.join(HERE, "qwen3-tiny-hf"), Wh, Vh)
    out["qwen3-tiny-hf"] = reference(Wh, True, True, "dense")
    out["qwen3-tiny-hf"]["routing"] = "dense"
    write_hf(os.path.join(HERE, "qwen3moe-tiny-hf"), Wq, len(G.spm_vocab(True)[0]),
             moe=True)
    for name, arch, W, qkn, neox, routing, extra in jobs:
        with open(os.path.join(HERE, name + ".gguf"), "wb") as f:
            f.write(gguf_bytes(arch, W, extra, dense=routing == "dense"))
        out[name] = reference(W, qkn, neox, routing)
        out[name]["routing"] = routing
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
