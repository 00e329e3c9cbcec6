"""model.py -- the six pipeline-native architectures, in PyTorch.

This file implements scripts/train/ARCHITECTURES.md (the contract with the C
engine) literally; read that first.  Shapes: B batch, T positions, d hidden
size, H query heads, K key/value heads, hd head_dim, E experts, F expert
hidden size.  Everything is f32.

Conventions the contract names but does not spell out, fixed here:
* RoPE: inv_freq[i] = theta^(-2i/hd), i < hd/2; angle = pos * inv_freq[i];
  the split-half (HF rotate_half) form: q' = q*cos + rotate_half(q)*sin with
  cos/sin repeated over both halves.  Positions start at 0 (the BOS token).
* GQA: query head h reads key/value head h // (H/K) (HF repeat_kv).
* Linear weights are stored [out][in] (HF/PyTorch), y = W x.
* Expert tensors: gate/up [E][F][d], down [E][d][F].
* MoE top-k: indices by torch.topk on p (training only cares about the
  values; the C engine breaks exact ties by lower index).

Effective layers: L = num_hidden_layers for styles 1-4; for arch5 (style 5)
the B stored blocks are applied `iterations` times each, so L = B * T.

The forward can record, per effective layer, "the residual after the layer"
(used by trace.py), defined per style as:
  1 DelayedSum         x_out[l] (includes expert outputs injected at l)
  2 AsyncExperts       x after x + m + d (outputs targeting l+1 not yet in)
  3 DecoupledStreams   (a + f) / 2 after the layer's merge step, if any
  4 PipelineRegisters  t[l]
  5 FixedPoint         x after the application
and "final" = the input of N_out (after the flush of pending expert outputs).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# arch -> (combine_style, dense_delay, expert_delay)
ARCH_STYLE = {
    "arch2_4_combined": (1, 1, 2),
    "arch2_4_sync": (1, 1, 0),
    "arch4": (2, 0, 2),
    "arch1": (3, 0, 0),
    "arch3": (4, 0, 0),
    "arch5": (5, 0, 0),
}
VARIANTS = ["arch2_4_combined", "arch2_4_sync", "arch4", "arch1", "arch3", "arch5"]


def make_config(arch, vocab_size, d=128, eff_layers=6, n_heads=4, n_kv=2,
                ffn=512, n_experts=4, topk=2, moe_ffn=128, max_pos=512,
                merge_interval=3, iterations=3):
    style, dd, de = ARCH_STYLE[arch]
    n_blocks = eff_layers // iterations if style == 5 else eff_layers
    return {
        "architectures": ["CflowPipelineForCausalLM"],
        "model_type": "cflow_pipeline",
        "cflow_arch": arch,
        "hidden_size": d,
        "num_hidden_layers": n_blocks,
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv,
        "head_dim": d // n_heads,
        "intermediate_size": ffn,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_pos,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "num_experts": n_experts,
        "num_experts_per_tok": topk,
        "moe_intermediate_size": moe_ffn,
        "dense_delay": dd,
        "expert_delay": de,
        "combine_style": style,
        "merge_interval": merge_interval if style == 3 else 0,
        "iterations": iterations if style == 5 else 1,
        "torch_dtype": "float32",
        "bos_token_id": vocab_size - 1,
        "eos_token_id": vocab_size - 1,
    }


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, h):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.H, self.K, self.hd = (c["hidden_size"], c["num_attention_heads"],
                                      c["num_key_value_heads"], c["head_dim"])
        self.q_proj = nn.Linear(d, self.H * self.hd, bias=False)
        self.k_proj = nn.Linear(d, self.K * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.K * self.hd, bias=False)
        self.o_proj = nn.Linear(self.H * self.hd, d, bias=False)

    def forward(self, n, cos, sin, mask):
        B, T, _ = n.shape
        q = self.q_proj(n).view(B, T, self.H, self.hd).transpose(1, 2)
        k = self.k_proj(n).view(B, T, self.K, self.hd).transpose(1, 2)
        v = self.v_proj(n).view(B, T, self.K, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.H // self.K
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask
        o = torch.softmax(s, dim=-1) @ v
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.H * self.hd))


class FFN(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, n):
        return self.down_proj(F.silu(self.gate_proj(n)) * self.up_proj(n))


class Experts(nn.Module):
    """E SwiGLU experts stacked: gate/up [E][F][d], down [E][d][F]."""

    def __init__(self, E, d, f):
        super().__init__()
        self.gate_proj = nn.Parameter(torch.empty(E, f, d))
        self.up_proj = nn.Parameter(torch.empty(E, f, d))
        self.down_proj = nn.Parameter(torch.empty(E, d, f))


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, E = c["hidden_size"], c["num_experts"]
        self.k = c["num_experts_per_tok"]
        self.E = E
        self.router = nn.Linear(d, E, bias=False)
        self.experts = Experts(E, d, c["moe_intermediate_size"])

    def forward(self, r):
        """r [B,T,d] -> (MoE(r) [B,T,d], aux load-balancing loss)."""
        p = torch.softmax(self.router(r), dim=-1)          # [B,T,E]
        topv, topi = torch.topk(p, self.k, dim=-1)
        w = torch.zeros_like(p).scatter(-1, topi, topv / topv.sum(-1, keepdim=True))
        ex = self.experts
        # every expert on every token (dense; small E), then weight by w
        g = torch.einsum("btd,efd->btef", r, ex.gate_proj)
        u = torch.einsum("btd,efd->btef", r, ex.up_proj)
        h = F.silu(g) * u * w.unsqueeze(-1)                # [B,T,E,F]
        out = torch.einsum("btef,edf->btd", h, ex.down_proj)
        # Switch-style balance loss: E * sum_e frac_routed_e * mean_prob_e
        routed = (w > 0).float().mean((0, 1)) / self.k
        aux = self.E * (routed * p.mean((0, 1))).sum()
        return out, aux


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, eps = c["hidden_size"], c["rms_norm_eps"]
        self.input_layernorm = RMSNorm(d, eps)               # N_a
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(d, eps)      # N_f
        self.mlp = FFN(d, c["intermediate_size"])
        self.has_moe = c["num_experts"] > 0
        if self.has_moe:
            self.moe_norm = RMSNorm(d, eps)                  # N_m
            self.moe = MoE(c)

    def attn(self, x, rope):
        return self.self_attn(self.input_layernorm(x), *rope)

    def ffn(self, y):
        return self.mlp(self.post_attention_layernorm(y))

    def moe_of(self, x):
        """(MoE(N_m(x)), aux) or (0, 0) without experts."""
        if not self.has_moe:
            return 0.0, 0.0
        return self.moe(self.moe_norm(x))


class CflowModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d = c["hidden_size"]
        self.embed_tokens = nn.Embedding(c["vocab_size"], d)
        self.layers = nn.ModuleList([Block(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(d, c["rms_norm_eps"])
        self.style = c["combine_style"]
        self.dd, self.de = c["dense_delay"], c["expert_delay"]
        self.iters = c["iterations"] if self.style == 5 else 1
        self.L = c["num_hidden_layers"] * self.iters
        hd = c["head_dim"]
        inv = c["rope_theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        pos = torch.arange(c["max_position_embeddings"], dtype=torch.float64)
        ang = torch.outer(pos, inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        self.reset_parameters()

    def reset_parameters(self, std=0.02):
        out_std = std / math.sqrt(2 * self.L)
        for name, p in self.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif "o_proj" in name or "down_proj" in name:
                nn.init.normal_(p, 0.0, out_std)
            else:
                nn.init.normal_(p, 0.0, std)

    def block_of(self, l):
        return self.layers[l // self.iters]

    def forward(self, ids, record=False):
        """ids [B,T] -> (logits [B,T,V], aux loss, record or None)."""
        B, T = ids.shape
        rope = (self.cos[:T], self.sin[:T],
                torch.full((T, T), float("-inf"), device=ids.device).triu(1))
        x = self.embed_tokens(ids)
        aux = 0.0
        rec = [] if record else None
        extra = {}
        L, st = self.L, self.style
        if st == 1:                                  # DelayedSum
            outs, pend = [], {}
            for l in range(L):
                blk = self.block_of(l)
                x_mid = x + blk.attn(x, rope)
                if self.dd == 0:
                    d = blk.ffn(x_mid)
                elif l - self.dd < 0:
                    d = 0.0
                else:
                    d = blk.ffn(outs[l - self.dd])
                e, a = blk.moe_of(x_mid)
                aux = aux + a
                t = l + self.de
                pend[t] = pend.get(t, 0.0) + e
                x = x_mid + d + pend.pop(l, 0.0)
                outs.append(x)
                if record:
                    rec.append(x)
            for t in sorted(pend):                   # flush past L-1
                x = x + pend[t]
        elif st == 2:                                # AsyncExperts
            pend = {}
            for l in range(L):
                blk = self.block_of(l)
                x = x + pend.pop(l, 0.0)
                m = blk.attn(x, rope)
                d = blk.ffn(x)
                e, a = blk.moe_of(x)
                aux = aux + a
                t = l + self.de
                pend[t] = pend.get(t, 0.0) + e
                x = x + m + d
                if record:
                    rec.append(x)
            for t in sorted(pend):
                x = x + pend[t]
        elif st == 3:                                # DecoupledStreams
            M = self.c["merge_interval"]
            a_s = f_s = x
            an, fn = [], []
            for l in range(L):
                blk = self.block_of(l)
                a_s = a_s + blk.attn(a_s, rope)
                e, a = blk.moe_of(f_s)
                aux = aux + a
                f_s = f_s + blk.ffn(f_s) + e
                if (l + 1) % M == 0:
                    a_s = f_s = (a_s + f_s) / 2
                if record:
                    rec.append((a_s + f_s) / 2)
                    an.append(a_s)
                    fn.append(f_s)
            x = (a_s + f_s) / 2
            extra = {"attn_stream": an, "ffn_stream": fn}
        elif st == 4:                                # PipelineRegisters
            a_s = t_s = x
            an = []
            for l in range(L):
                blk = self.block_of(l)
                a_new = a_s + blk.attn(a_s, rope)
                e, a = blk.moe_of(t_s)
                aux = aux + a
                f = blk.ffn(t_s) + e
                t_s = a_new + f
                a_s = a_new
                if record:
                    rec.append(t_s)
                    an.append(a_s)
            x = t_s
            extra = {"attn_reg": an}
        elif st == 5:                                # FixedPoint
            for l in range(L):
                blk = self.block_of(l)
                x = x + blk.attn(x, rope)
                e, a = blk.moe_of(x)
                aux = aux + a
                x = x + blk.ffn(x) + e
                if record:
                    rec.append(x)
        elif st == 0:                                # ParallelSqrt2
            for l in range(L):
                blk = self.block_of(l)
                x_mid = x + blk.attn(x, rope)
                d = blk.ffn(x_mid)
                if blk.has_moe:
                    e, a = blk.moe_of(x_mid)
                    aux = aux + a
                    x = x_mid + (d + e) / math.sqrt(2)
                else:
                    x = x_mid + d
                if record:
                    rec.append(x)
        else:
            raise ValueError(f"combine_style {st}")
        final_in = x
        h = self.norm(x)
        logits = h @ self.embed_tokens.weight.t()
        if record:
            return logits, aux, {"layers": rec, "final_in": final_in,
                                 "final_norm": h, **extra}
        return logits, aux, None
