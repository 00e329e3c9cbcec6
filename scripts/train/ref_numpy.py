#!/usr/bin/python3
"""ref_numpy.py -- an independent, token-at-a-time reference of ARCHITECTURES.md.

Written straight from the contract, the way the C engine runs: numpy, one
token per step, a KV cache per effective layer, weights read from the
exported directory by their Hugging Face names (so it also checks export.py's
naming).  check() compares its logits, at every position, with the batched
PyTorch model of model.py loaded from the same directory.

Usage: ref_numpy.py MODELDIR... [--prompt TEXT]   (exit 1 on disagreement)
"""
import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bpe import Tokenizer  # noqa: E402
from export import read_safetensors  # noqa: E402


class Ref:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            self.c = json.load(f)
        self.w = {k: v.astype(np.float64) for k, v in
                  read_safetensors(os.path.join(d, "model.safetensors")).items()}
        c = self.c
        self.style = c["combine_style"]
        self.T = c["iterations"] if self.style == 5 else 1
        self.L = c["num_hidden_layers"] * self.T
        self.hd = c["head_dim"]
        self.cache = [([], []) for _ in range(self.L)]
        self.pos = 0

    def W(self, b, name):
        return self.w[f"model.layers.{b}.{name}"]

    def norm(self, h, wt):
        return h / np.sqrt(np.mean(h * h) + self.c["rms_norm_eps"]) * wt

    def rope(self, v, pos):
        hd = self.hd
        half = hd // 2
        inv = self.c["rope_theta"] ** (-np.arange(0, hd, 2) / hd)
        ang = pos * inv
        cos, sin = np.cos(ang), np.sin(ang)
        v = v.reshape(-1, hd)
        a, b = v[:, :half], v[:, half:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=1)

    def attn(self, l, b, x):
        c = self.c
        n = self.norm(x, self.W(b, "input_layernorm.weight"))
        H, K, hd = c["num_attention_heads"], c["num_key_value_heads"], self.hd
        q = self.rope(self.W(b, "self_attn.q_proj.weight") @ n, self.pos)
        k = self.rope(self.W(b, "self_attn.k_proj.weight") @ n, self.pos)
        v = (self.W(b, "self_attn.v_proj.weight") @ n).reshape(K, hd)
        ks, vs = self.cache[l]
        ks.append(k)
        vs.append(v)
        Ks, Vs = np.stack(ks), np.stack(vs)          # [t][K][hd]
        out = np.zeros((H, hd))
        for h in range(H):
            g = h // (H // K)
            s = Ks[:, g, :] @ q[h] / np.sqrt(hd)
            p = np.exp(s - s.max())
            p /= p.sum()
            out[h] = p @ Vs[:, g, :]
        return self.W(b, "self_attn.o_proj.weight") @ out.reshape(-1)

    def ffn(self, b, y):
        n = self.norm(y, self.W(b, "post_attention_layernorm.weight"))
        g = self.W(b, "mlp.gate_proj.weight") @ n
        u = self.W(b, "mlp.up_proj.weight") @ n
        return self.W(b, "mlp.down_proj.weight") @ (g / (1 + np.exp(-g)) * u)

    def moe(self, b, x):
        c = self.c
        if c["num_experts"] == 0:
            return 0.0
        r = self.norm(x, self.W(b, "moe_norm.weight"))
        lg = self.W(b, "moe.router.weight") @ r
        p = np.exp(lg - lg.max())
        p /= p.sum()
        top = sorted(range(len(p)), key=lambda i: (-p[i], i))[:c["num_experts_per_tok"]]
        wsum = sum(p[i] for i in top)
        out = 0.0
        for i in top:
            g = self.W(b, "moe.experts.gate_proj.weight")[i] @ r
            u = self.W(b, "moe.experts.up_proj.weight")[i] @ r
            e = self.W(b, "moe.experts.down_proj.weight")[i] @ (g / (1 + np.exp(-g)) * u)
            out = out + p[i] / wsum * e
        return out

    def step(self, token):
        c = self.c
        x = self.w["model.embed_tokens.weight"][token].copy()
        L, st = self.L, self.style
        dd, de = c["dense_delay"], c["expert_delay"]
        if st == 1:
            outs, pend = [], {}
            for l in range(L):
                xm = x + self.attn(l, l, x)
                if dd == 0:
                    d = self.ffn(l, xm)
                elif l - dd < 0:
                    d = 0.0
                else:
                    d = self.ffn(l, outs[l - dd])
                pend[l + de] = pend.get(l + de, 0.0) + self.moe(l, xm)
                x = xm + d + pend.pop(l, 0.0)
                outs.append(x)
            x = x + sum(pend.values())
        elif st == 2:
            pend = {}
            for l in range(L):
                x = x + pend.pop(l, 0.0)
                m, d = self.attn(l, l, x), self.ffn(l, x)
                pend[l + de] = pend.get(l + de, 0.0) + self.moe(l, x)
                x = x + m + d
            x = x + sum(pend.values())
        elif st == 3:
            M = c["merge_interval"]
            a = f = x
            for l in range(L):
                a = a + self.attn(l, l, a)
                f = f + self.ffn(l, f) + self.moe(l, f)
                if (l + 1) % M == 0:
                    a = f = (a + f) / 2
            x = (a + f) / 2
        elif st == 4:
            a = t = x
            for l in range(L):
                a = a + self.attn(l, l, a)
                t = a + self.ffn(l, t) + self.moe(l, t)
            x = t
        elif st == 5:
            for l in range(L):
                b = l // self.T
                x = x + self.attn(l, b, x)
                x = x + self.ffn(b, x) + self.moe(b, x)
        self.pos += 1
        h = self.norm(x, self.w["model.norm.weight"])
        return self.w["model.embed_tokens.weight"] @ h


def check(d, prompt):
    import torch
    from export import load
    tok = Tokenizer(d)
    ids = [tok.bos] + tok.encode(prompt)
    ref = Ref(d)
    r = np.stack([ref.step(t) for t in ids])
    m = load(d)
    with torch.no_grad():
        lg = m(torch.tensor([ids]))[0][0].double().numpy()
    diff = np.abs(r - lg).max()
    scale = np.abs(r).max()
    ok = diff <= 1e-3 * max(1.0, scale) and (r.argmax(1) == lg.argmax(1)).all()
    print(f"{ref.c['cflow_arch']}: {len(ids)} positions, max |numpy - torch| "
          f"{diff:.3g} (max |logit| {scale:.3g}) {'OK' if ok else 'MISMATCH'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", default="Once upon a time, there was a little girl named "
                    "Lily. She liked to play in the park with her red ball.")
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    ok = all([check(d, args.prompt) for d in args.models])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
