#!/usr/bin/env python3
"""make_families.py -- a tiny random-weight model of each family (issue 42),
as a Hugging Face folder and as the GGUF llama.cpp's converter would make of
it, written with llama.cpp's gguf-py.

    GGUF_PY=/path/to/llama.cpp/gguf-py python3 tests/data/families/make_families.py

writes, next to this script, for F in olmoe phi3 gemma2 gemma3 gptoss
deepseek2:
  F-tiny-hf/     config.json, model.safetensors (f32), tokenizer.json: the
                 family's checkpoint in transformers' layout (OLMoE's experts
                 one tensor each, Phi-3's fused qkv_proj and gate_up_proj and
                 LongRoPE factors in config.json, Gemma's norms stored as
                 w - 1, gpt-oss's experts Linear-style with gate and up
                 interleaved, DeepSeek-V2's fused kv_b_proj)
  F-tiny-f32.gguf the same weights through convert_hf_to_gguf.py's rules for
                 the family (names; Gemma's norms + 1; OLMoE's experts
                 stacked; gpt-oss's gate/up split and transposed, its sinks;
                 DeepSeek-V2's kv_b_proj split into attn_k_b and attn_v_b),
                 its keys as the converter writes them, f32 tensors, written
                 by gguf-py's GGUFWriter
Every model has 4 heads of 16 (OLMoE 4 KV heads, the others 2; DeepSeek-V2
2 heads and one KV head of its latent of 128 and rotated key of 16), d 64, and
the fuzz seeds' small SentencePiece vocabulary with byte tokens
(tests/fuzz/gen_seeds.py spm_vocab, its tokenizer.json twin), so a prompt
tokenises the same from either file.  Q and K weights have sd 0.3 (attention
sharp enough for positions to matter); every other matrix 0.1, embeddings
0.5 (Gemma's 0.05), norms 1 + N(0, 0.1).  gguf-py is llama.cpp's (its gguf-py folder, not
committed here); numpy only otherwise.

The quantised GGUFs and llama.cpp's greedy ids are made from these with
llama.cpp's own tools (README.md gives the commands).
"""
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "fuzz"))
import gen_seeds as G  # noqa: E402

gguf_py = os.environ.get("GGUF_PY")
if not gguf_py:
    sys.exit("set GGUF_PY to llama.cpp's gguf-py folder")
sys.path.insert(0, gguf_py)
import gguf  # noqa: E402

D, H, HD = 64, 4, 16
TOKS, SCORES, TYPES = G.spm_vocab(True)
V = len(TOKS)


class Rand:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def m(self, *shape, sd=0.1):
        return (self.rng.standard_normal(shape) * sd).astype(np.float32)

    def norm(self, n, base=1.0, sd=0.1):
        return (base + self.rng.standard_normal(n) * sd).astype(np.float32)


def write_hf(name, cfg, T):
    d = os.path.join(HERE, name + "-tiny-hf")
    os.makedirs(d, exist_ok=True)
    cfg = dict(cfg, vocab_size=V, hidden_size=D,
               num_attention_heads=cfg.get("num_attention_heads", H),
               head_dim=cfg["head_dim"] if "head_dim" in cfg else HD,
               torch_dtype="float32", bos_token_id=1, eos_token_id=2)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(G.safetensors([(k, list(a.shape), "F32", a.astype("<f4").tobytes())
                               for k, a in T.items()], {"format": "pt"}))
    with open(os.path.join(d, "tokenizer.json"), "wb") as f:
        f.write(G.tokenizer_json_spm())


def write_gguf(name, arch, keys, T):
    """keys: (method of GGUFWriter, value) in order; T: GGUF name -> array"""
    w = gguf.GGUFWriter(os.path.join(HERE, name + "-tiny-f32.gguf"), arch)
    # (not "phi3": llama.cpp gives a model of that name Phi-3's special
    # tokens, which this vocabulary lacks)
    w.add_name("tiny-" + name.replace("phi3", "phi"))
    for meth, val in keys:
        if meth.startswith("."):          # a key of the architecture by name
            w.add_uint32(arch + meth, val) if isinstance(val, int) else \
                w.add_float32(arch + meth, val)
        else:
            getattr(w, meth)(val)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(TOKS)
    w.add_token_scores(SCORES)
    w.add_token_types(TYPES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    for k, a in T.items():
        w.add_tensor(k, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def common(hf, g, r, L, kv, tied, qk_sd=0.3, emb_sd=0.5):
    """The embedding, norms and attention every family shares; HF names into
    hf, GGUF names into g."""
    hf["model.embed_tokens.weight"] = g["token_embd.weight"] = r.m(V, D, sd=emb_sd)
    hf["model.norm.weight"] = g["output_norm.weight"] = r.norm(D)
    if not tied:
        hf["lm_head.weight"] = g["output.weight"] = r.m(V, D, sd=0.15)
    for l in range(L):
        p, b = "model.layers.%d." % l, "blk.%d." % l
        hf[p + "input_layernorm.weight"] = g[b + "attn_norm.weight"] = r.norm(D)
        hf[p + "self_attn.q_proj.weight"] = g[b + "attn_q.weight"] = r.m(H * HD, D, sd=qk_sd)
        hf[p + "self_attn.k_proj.weight"] = g[b + "attn_k.weight"] = r.m(kv * HD, D, sd=qk_sd)
        hf[p + "self_attn.v_proj.weight"] = g[b + "attn_v.weight"] = r.m(kv * HD, D)
        hf[p + "self_attn.o_proj.weight"] = g[b + "attn_output.weight"] = r.m(D, H * HD)


def olmoe():
    r, L, E, K, F = Rand(101), 2, 8, 2, 32
    hf, g = {}, {}
    common(hf, g, r, L, H, False)
    for l in range(L):
        p, b = "model.layers.%d." % l, "blk.%d." % l
        hf[p + "self_attn.q_norm.weight"] = g[b + "attn_q_norm.weight"] = r.norm(H * HD)
        hf[p + "self_attn.k_norm.weight"] = g[b + "attn_k_norm.weight"] = r.norm(H * HD)
        hf[p + "post_attention_layernorm.weight"] = g[b + "ffn_norm.weight"] = r.norm(D)
        hf[p + "mlp.gate.weight"] = g[b + "ffn_gate_inp.weight"] = r.m(E, D, sd=0.5)
        ex = {k: r.m(E, *shape) for k, shape in
              (("gate", (F, D)), ("up", (F, D)), ("down", (D, F)))}
        for e in range(E):
            for k in ex:
                hf[p + "mlp.experts.%d.%s_proj.weight" % (e, k)] = ex[k][e]
        for k in ex:
            g[b + "ffn_%s_exps.weight" % k] = ex[k]
    write_hf("olmoe", dict(architectures=["OlmoeForCausalLM"], model_type="olmoe",
                           intermediate_size=F, num_hidden_layers=L, num_key_value_heads=H,
                           num_experts=E, num_experts_per_tok=K, norm_topk_prob=False,
                           clip_qkv=None, max_position_embeddings=256, rms_norm_eps=1e-5,
                           rope_theta=10000.0, tie_word_embeddings=False,
                           hidden_act="silu"), hf)
    write_gguf("olmoe", "olmoe", [
        ("add_context_length", 256), ("add_embedding_length", D), ("add_feed_forward_length", F),
        ("add_block_count", L), ("add_head_count", H), ("add_head_count_kv", H),
        ("add_rope_freq_base", 10000.0), ("add_layer_norm_rms_eps", 1e-5),
        ("add_expert_count", E), ("add_expert_used_count", K)], g)


def phi3():
    r, L, F, KV, CTX, ORIG = Rand(102), 2, 96, 2, 1024, 256
    rot = int(0.75 * D) // H
    hf, g = {}, {}
    common(hf, g, r, L, KV, False)
    short, long_ = r.norm(rot // 2), r.norm(rot // 2, 4.0, 0.5)
    for l in range(L):
        p, b = "model.layers.%d." % l, "blk.%d." % l
        q, k, v = (hf.pop(p + "self_attn.%s_proj.weight" % x) for x in "qkv")
        for x in ("q", "k", "v"):
            del g[b + "attn_%s.weight" % x]
        hf[p + "self_attn.qkv_proj.weight"] = g[b + "attn_qkv.weight"] = \
            np.concatenate([q, k, v])
        hf[p + "post_attention_layernorm.weight"] = g[b + "ffn_norm.weight"] = r.norm(D)
        hf[p + "mlp.gate_up_proj.weight"] = g[b + "ffn_up.weight"] = r.m(2 * F, D)
        hf[p + "mlp.down_proj.weight"] = g[b + "ffn_down.weight"] = r.m(D, F)
    g["rope_factors_long.weight"], g["rope_factors_short.weight"] = long_, short
    scale = CTX / ORIG
    attn_factor = math.sqrt(1 + math.log(scale) / math.log(ORIG))
    write_hf("phi3", dict(architectures=["Phi3ForCausalLM"], model_type="phi3",
                          intermediate_size=F, num_hidden_layers=L, num_key_value_heads=KV,
                          max_position_embeddings=CTX, original_max_position_embeddings=ORIG,
                          partial_rotary_factor=0.75, rms_norm_eps=1e-5, rope_theta=10000.0,
                          rope_scaling=dict(type="longrope", short_factor=short.tolist(),
                                            long_factor=long_.tolist()),
                          sliding_window=None, tie_word_embeddings=False,
                          hidden_act="silu"), hf)
    write_gguf("phi3", "phi3", [
        ("add_context_length", CTX), ("add_rope_scaling_orig_ctx_len", ORIG),
        ("add_embedding_length", D), ("add_feed_forward_length", F), ("add_block_count", L),
        ("add_head_count", H), ("add_head_count_kv", KV), ("add_layer_norm_rms_eps", 1e-5),
        ("add_rope_dimension_count", rot), ("add_rope_freq_base", 10000.0),
        ("add_sliding_window", 0), ("add_rope_scaling_attn_factors", attn_factor)], g)


def gemma(v3):
    name = "gemma3" if v3 else "gemma2"
    r, L, F, KV, SW = Rand(103 + v3), 4, 96, 2, 8
    hf, g = {}, {}
    # Gemma multiplies the embedding by sqrt(d) and ties the head to it: a
    # small embedding, or the head would only echo the last token
    common(hf, g, r, L, KV, True, emb_sd=0.05)
    for l in range(L):
        p, b = "model.layers.%d." % l, "blk.%d." % l
        for hn, gn in (("post_attention_layernorm", "post_attention_norm"),
                       ("pre_feedforward_layernorm", "ffn_norm"),
                       ("post_feedforward_layernorm", "post_ffw_norm")):
            hf[p + hn + ".weight"] = g[b + gn + ".weight"] = r.norm(D)
        if v3:
            hf[p + "self_attn.q_norm.weight"] = g[b + "attn_q_norm.weight"] = r.norm(HD, 1, 0.3)
            hf[p + "self_attn.k_norm.weight"] = g[b + "attn_k_norm.weight"] = r.norm(HD, 1, 0.3)
        hf[p + "mlp.gate_proj.weight"] = g[b + "ffn_gate.weight"] = r.m(F, D)
        hf[p + "mlp.up_proj.weight"] = g[b + "ffn_up.weight"] = r.m(F, D)
        hf[p + "mlp.down_proj.weight"] = g[b + "ffn_down.weight"] = r.m(D, F)
    # Gemma's RMSNorm multiplies by 1 + w: the checkpoint holds w - 1 of the
    # weights the GGUF holds (the converter adds the 1 to every *norm.weight)
    for k in list(hf):
        if k.endswith("norm.weight"):
            hf[k] = (hf[k] - 1.0).astype(np.float32)
    layer_types = ["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(L)]
    cfg = dict(architectures=["Gemma3ForCausalLM" if v3 else "Gemma2ForCausalLM"],
               model_type="gemma3_text" if v3 else "gemma2", intermediate_size=F,
               num_hidden_layers=L, num_key_value_heads=KV, max_position_embeddings=2048,
               rms_norm_eps=1e-6, query_pre_attn_scalar=HD, sliding_window=SW,
               layer_types=layer_types, hidden_activation="gelu_pytorch_tanh",
               tie_word_embeddings=True)
    keys = [("add_context_length", 2048), ("add_embedding_length", D), ("add_block_count", L),
            ("add_feed_forward_length", F), ("add_head_count", H), ("add_head_count_kv", KV),
            ("add_layer_norm_rms_eps", 1e-6), ("add_key_length", HD), ("add_value_length", HD),
            ("add_sliding_window", SW)]
    if v3:
        cfg.update(rope_theta=1e6, rope_local_base_freq=10000.0, sliding_window_pattern=2,
                   rope_scaling=dict(rope_type="linear", factor=8.0))
        keys += [("add_rope_scaling_type", gguf.RopeScalingType.LINEAR),
                 ("add_rope_scaling_factor", 8.0), ("add_rope_freq_base", 1e6),
                 ("add_rope_freq_base_swa", 10000.0), (".attention.sliding_window_pattern", 2)]
    else:
        cfg.update(rope_theta=10000.0, attn_logit_softcapping=50.0,
                   final_logit_softcapping=30.0)
        keys += [("add_attn_logit_softcapping", 50.0), ("add_final_logit_softcapping", 30.0)]
    write_hf(name, cfg, hf)
    write_gguf(name, name, keys, g)


def gptoss():
    r, L, E, K, F, KV, SW = Rand(105), 2, 8, 2, 32, 2, 8
    hf, g = {}, {}
    common(hf, g, r, L, KV, False)
    for l in range(L):
        p, b = "model.layers.%d." % l, "blk.%d." % l
        for x, n in (("q", H), ("k", KV), ("v", KV)):
            hf[p + "self_attn.%s_proj.bias" % x] = g[b + "attn_%s.bias" % x] = r.m(n * HD)
        hf[p + "self_attn.o_proj.bias"] = g[b + "attn_output.bias"] = r.m(D)
        hf[p + "self_attn.sinks"] = g[b + "attn_sinks.weight"] = r.m(H, sd=1.0)
        hf[p + "post_attention_layernorm.weight"] = g[b + "post_attention_norm.weight"] = \
            r.norm(D)
        hf[p + "mlp.router.weight"] = g[b + "ffn_gate_inp.weight"] = r.m(E, D, sd=0.5)
        hf[p + "mlp.router.bias"] = g[b + "ffn_gate_inp.bias"] = r.m(E, sd=0.5)
        gate, up, down = r.m(E, F, D), r.m(E, F, D), r.m(E, D, F)
        gb, ub, db = r.m(E, F), r.m(E, F), r.m(E, D)
        # transformers' layout: x @ gate_up_proj[e], gate and up interleaved
        gu = np.empty((E, D, 2 * F), np.float32)
        gu[:, :, 0::2], gu[:, :, 1::2] = gate.transpose(0, 2, 1), up.transpose(0, 2, 1)
        gub = np.empty((E, 2 * F), np.float32)
        gub[:, 0::2], gub[:, 1::2] = gb, ub
        hf[p + "mlp.experts.gate_up_proj"] = gu
        hf[p + "mlp.experts.gate_up_proj_bias"] = gub
        hf[p + "mlp.experts.down_proj"] = np.ascontiguousarray(down.transpose(0, 2, 1))
        hf[p + "mlp.experts.down_proj_bias"] = db
        g[b + "ffn_gate_exps.weight"], g[b + "ffn_up_exps.weight"] = gate, up
        g[b + "ffn_down_exps.weight"] = down
        g[b + "ffn_gate_exps.bias"], g[b + "ffn_up_exps.bias"] = gb, ub
        g[b + "ffn_down_exps.bias"] = db
    write_hf("gptoss", dict(architectures=["GptOssForCausalLM"], model_type="gpt_oss",
                            intermediate_size=F, num_hidden_layers=L, num_key_value_heads=KV,
                            num_local_experts=E, num_experts_per_tok=K, attention_bias=True,
                            max_position_embeddings=2048, rms_norm_eps=1e-5,
                            rope_theta=150000.0, sliding_window=SW, swiglu_limit=7.0,
                            layer_types=["sliding_attention", "full_attention"],
                            rope_scaling=dict(rope_type="yarn", factor=32.0, beta_fast=32.0,
                                              beta_slow=1.0,
                                              original_max_position_embeddings=64),
                            tie_word_embeddings=False, hidden_act="silu"), hf)
    write_gguf("gptoss", "gpt-oss", [
        ("add_block_count", L), ("add_context_length", 2048), ("add_embedding_length", D),
        ("add_feed_forward_length", F), ("add_head_count", H), ("add_head_count_kv", KV),
        ("add_rope_scaling_type", gguf.RopeScalingType.YARN), ("add_rope_scaling_factor", 32.0),
        ("add_rope_scaling_orig_ctx_len", 64), ("add_rope_scaling_yarn_beta_fast", 32.0),
        ("add_rope_scaling_yarn_beta_slow", 1.0), ("add_rope_freq_base", 150000.0),
        ("add_layer_norm_rms_eps", 1e-5), ("add_expert_count", E), ("add_expert_used_count", K),
        ("add_sliding_window", SW), ("add_expert_feed_forward_length", F)], g)


def deepseek2():
    """DeepSeek-V2 as llama.cpp reads a 3-layer one: the low-rank query
    (its 26- and 27-layer V2-Lite alone projects q directly), the latent
    attention (kv_b_proj split into k_b, transposed, and v_b), a leading
    dense layer, shared experts, grouped top-k, a routed scale, YaRN with
    mscale_all_dim"""
    # (two heads, the least a latent of 128 rows a head makes)
    r, L, E, K, F, QL, R, NOPE, ROPE, VD = Rand(106), 3, 4, 2, 32, 64, 128, 32, 16, 128
    DF, G, GU, SCALE, MS, H = 96, 2, 1, 1.5, 0.707, 2
    hf, g = {}, {}
    hf["model.embed_tokens.weight"] = g["token_embd.weight"] = r.m(V, D, sd=0.5)
    hf["model.norm.weight"] = g["output_norm.weight"] = r.norm(D)
    hf["lm_head.weight"] = g["output.weight"] = r.m(V, D, sd=0.15)
    for l in range(L):
        p, b = "model.layers.%d." % l, "blk.%d." % l
        hf[p + "input_layernorm.weight"] = g[b + "attn_norm.weight"] = r.norm(D)
        hf[p + "self_attn.q_a_proj.weight"] = g[b + "attn_q_a.weight"] = r.m(QL, D, sd=0.3)
        hf[p + "self_attn.q_a_layernorm.weight"] = g[b + "attn_q_a_norm.weight"] = r.norm(QL)
        hf[p + "self_attn.q_b_proj.weight"] = g[b + "attn_q_b.weight"] = \
            r.m(H * (NOPE + ROPE), QL, sd=0.3)
        hf[p + "self_attn.kv_a_proj_with_mqa.weight"] = g[b + "attn_kv_a_mqa.weight"] = \
            r.m(R + ROPE, D, sd=0.3)
        hf[p + "self_attn.kv_a_layernorm.weight"] = g[b + "attn_kv_a_norm.weight"] = r.norm(R)
        kvb = r.m(H * (NOPE + VD), R, sd=0.15)
        hf[p + "self_attn.kv_b_proj.weight"] = kvb
        # the converter's split: k_b transposed per head, v_b as it is
        hv = kvb.reshape(H, NOPE + VD, R)
        g[b + "attn_k_b.weight"] = np.ascontiguousarray(hv[:, :NOPE, :].transpose(0, 2, 1))
        g[b + "attn_v_b.weight"] = np.ascontiguousarray(hv[:, NOPE:, :])
        hf[p + "self_attn.o_proj.weight"] = g[b + "attn_output.weight"] = r.m(D, H * VD)
        hf[p + "post_attention_layernorm.weight"] = g[b + "ffn_norm.weight"] = r.norm(D)
        if l == 0:
            hf[p + "mlp.gate_proj.weight"] = g[b + "ffn_gate.weight"] = r.m(DF, D)
            hf[p + "mlp.up_proj.weight"] = g[b + "ffn_up.weight"] = r.m(DF, D)
            hf[p + "mlp.down_proj.weight"] = g[b + "ffn_down.weight"] = r.m(D, DF)
            continue
        hf[p + "mlp.gate.weight"] = g[b + "ffn_gate_inp.weight"] = r.m(E, D, sd=0.5)
        ex = {k: r.m(E, *shape) for k, shape in
              (("gate", (F, D)), ("up", (F, D)), ("down", (D, F)))}
        for e in range(E):
            for k in ex:
                hf[p + "mlp.experts.%d.%s_proj.weight" % (e, k)] = ex[k][e]
        for k in ex:
            g[b + "ffn_%s_exps.weight" % k] = ex[k]
        for k, shape in (("gate", (F, D)), ("up", (F, D)), ("down", (D, F))):
            hf[p + "mlp.shared_experts.%s_proj.weight" % k] = \
                g[b + "ffn_%s_shexp.weight" % k] = r.m(*shape)
    write_hf("deepseek2", dict(architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2",
                               num_attention_heads=H, head_dim=None,
                               intermediate_size=DF, moe_intermediate_size=F,
                               num_hidden_layers=L, num_key_value_heads=H, n_routed_experts=E,
                               num_experts_per_tok=K, n_shared_experts=1,
                               first_k_dense_replace=1, moe_layer_freq=1,
                               routed_scaling_factor=SCALE, n_group=G, topk_group=GU,
                               topk_method="group_limited_greedy", norm_topk_prob=False,
                               scoring_func="softmax", q_lora_rank=QL, kv_lora_rank=R,
                               qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=VD,
                               max_position_embeddings=256, rms_norm_eps=1e-6,
                               rope_theta=10000.0,
                               rope_scaling=dict(type="yarn", factor=4.0, beta_fast=32,
                                                 beta_slow=1, mscale=MS, mscale_all_dim=MS,
                                                 original_max_position_embeddings=64),
                               tie_word_embeddings=False, hidden_act="silu"), hf)
    write_gguf("deepseek2", "deepseek2", [
        ("add_block_count", L), ("add_context_length", 256), ("add_embedding_length", D),
        ("add_feed_forward_length", DF), ("add_head_count", H), ("add_head_count_kv", 1),
        ("add_rope_freq_base", 10000.0), ("add_layer_norm_rms_eps", 1e-6),
        ("add_expert_count", E), ("add_expert_used_count", K), ("add_expert_group_count", G),
        ("add_expert_group_used_count", GU),
        ("add_expert_gating_func", gguf.ExpertGatingFuncType.SOFTMAX),
        ("add_rope_scaling_type", gguf.RopeScalingType.YARN), ("add_rope_scaling_factor", 4.0),
        ("add_rope_scaling_orig_ctx_len", 64), ("add_rope_scaling_yarn_beta_fast", 32.0),
        ("add_rope_scaling_yarn_beta_slow", 1.0), ("add_leading_dense_block_count", 1),
        ("add_vocab_size", V), ("add_q_lora_rank", QL), ("add_kv_lora_rank", R),
        ("add_key_length", R + ROPE), ("add_value_length", R),
        ("add_key_length_mla", NOPE + ROPE), ("add_value_length_mla", VD),
        ("add_expert_feed_forward_length", F), ("add_expert_shared_count", 1),
        ("add_expert_weights_scale", SCALE), ("add_rope_dimension_count", ROPE),
        ("add_rope_scaling_yarn_log_mul", 0.1 * MS)], g)


if __name__ == "__main__":
    if sys.argv[1:] == ["deepseek2"]:       # (the family added last, alone)
        deepseek2()
        sys.exit(0)
    olmoe()
    phi3()
    gemma(False)
    gemma(True)
    gptoss()
    deepseek2()
