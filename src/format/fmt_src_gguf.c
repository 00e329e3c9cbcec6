/*
 * fmt_src_gguf.c — a GGUF file as a conversion source (struct fmt_src).
 *
 * The tensors stay in the fmt_gguf mapping; this file reads the
 * architecture's metadata keys ("<arch>.block_count", ...) into fmt_hparams,
 * checks the Llama-3 RoPE scaling against rope_freqs.weight when the file
 * carries one, fits the vocabulary and binds the GGUF tensor names to roles
 * (fmt_gguf_role_names).  Supported architectures: those of fmt_family.c's
 * table, whose entries read each family's own keys after the common ones
 * (both through fmt_gguf_key_u32/_f32, fmt_src.c).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

static int gguf_rope_scaling(fmt_src *s, const char *arch, char *err,
                             size_t errlen)
{
    fmt_hparams *h = &s->hp;
    char key[128];
    size_t tl = 0;
    int rc;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *type = fmt_kv_get_str(s->kv, key, &tl);
    const fmt_tensor *rf = fmt_src_find(s, "rope_freqs.weight");
    int llama3 = rf || (type && tl == 6 && memcmp(type, "llama3", 6) == 0);
    if (!llama3)
        return FMT_OK;                 /* the other scalings: fmt_family.c */
    h->flags |= FMT_FLAG_ROPE_LLAMA3;
    /* llama.cpp's converter bakes Llama-3 scaling into rope_freqs.weight
     * and writes no scaling keys; its defaults are Llama 3.1's */
    h->rope_factor = 8.0f;
    h->rope_low_freq = 1.0f;
    h->rope_high_freq = 4.0f;
    h->rope_orig_ctx = 8192;
    if (rf && rf->dtype == FMT_DT_F32 && rf->ndim == 1 &&
        rf->ne[0] == h->head_dim / 2) {
        /* Recover the factor from the lowest frequency's entry v (with the
         * default low/high/context; keys below override, and the check at
         * the end proves the result): past the low-frequency wavelength
         * v = factor; in the smooth band v = 1/((1-s)/factor + s). */
        const double pi = 3.14159265358979323846;
        unsigned last = h->head_dim / 2 - 1;
        float v = kern_ld_f32((const uint8_t *)rf->data + 4 * (size_t)last);
        double freq = 1.0 / pow(h->rope_theta,
                                (double)(2 * last) / h->head_dim);
        double wl = 2 * pi / freq, old = h->rope_orig_ctx;
        if (wl > old / h->rope_low_freq) {
            h->rope_factor = v;
        } else if (wl >= old / h->rope_high_freq && v > 0) {
            double sm = (old / wl - h->rope_low_freq) /
                        (h->rope_high_freq - h->rope_low_freq);
            if (sm < 1 && 1 / v - sm > 0)
                h->rope_factor = (float)((1 - sm) / (1 / v - sm));
        }
    } else if (rf) {
        fmt_err(err, errlen, "%s: rope_freqs.weight should be %u f32 values",
                s->path, h->head_dim / 2);
        return FMT_EFORMAT;
    }
    if ((rc = fmt_gguf_key_f32(s, "rope.scaling.factor", &h->rope_factor,
                         err, errlen)) < 0 ||
        (rc = fmt_gguf_key_f32(s, "rope.scaling.low_freq_factor",
                         &h->rope_low_freq, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_f32(s, "rope.scaling.high_freq_factor",
                         &h->rope_high_freq, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "rope.scaling.original_context_length", &h->rope_orig_ctx, 0,
                               err, errlen)) < 0)
        return rc;
    if ((rc = fmt_src_check_hparams(s, err, errlen)) < 0)
        return rc;
    if (rf) {
        /* the parameters must reproduce the stored factors */
        float *f = malloc((h->head_dim / 2) * sizeof *f);
        if (!f) {
            fmt_err(err, errlen, "%s: out of memory", s->path);
            return FMT_ENOMEM;
        }
        fmt_rope_llama3_factors(h, f);
        for (unsigned i = 0; i < h->head_dim / 2; i++) {
            float v = kern_ld_f32((const uint8_t *)rf->data + 4 * (size_t)i);
            if (!(fabsf(v - f[i]) <= 1e-3f * fabsf(f[i]))) {
                fmt_err(err, errlen, "%s: rope_freqs.weight[%u] = %g is not "
                        "Llama-3 scaling (factor %g, low %g, high %g, "
                        "context %u gives %g)", s->path, i, v,
                        h->rope_factor, h->rope_low_freq, h->rope_high_freq,
                        h->rope_orig_ctx, f[i]);
                free(f);
                return FMT_EUNSUP;
            }
        }
        free(f);
    }
    return FMT_OK;
}

/* The vocabulary's size: the embedding's rows, which ARCH.vocab_size, when
 * the file has it, must equal. */
static int gguf_vocab_size(fmt_src *s, const char *a, char *err, size_t errlen)
{
    fmt_hparams *h = &s->hp;
    const fmt_tensor *emb = fmt_src_find(s, "token_embd.weight");
    if (!emb || emb->ndim > 2) {
        fmt_err(err, errlen, "%s: tensor 'token_embd.weight' is %s", s->path,
                emb ? "not a matrix" : "missing");
        return FMT_EFORMAT;
    }
    if (emb->ne[1] > UINT32_MAX) {
        fmt_err(err, errlen, "%s: implausible vocabulary size", s->path);
        return FMT_EFORMAT;
    }
    h->vocab_size = (uint32_t)emb->ne[1];
    uint32_t vs;
    char key[64];
    snprintf(key, sizeof key, "%s.vocab_size", a);
    if (fmt_kv_get_u32(s->kv, key, &vs) == 0 && vs != h->vocab_size) {
        fmt_err(err, errlen, "%s: %s is %u but token_embd.weight has %u rows",
                s->path, key, vs, h->vocab_size);
        return FMT_EFORMAT;
    }
    return FMT_OK;
}

/* A MoE's expert keys: the experts' FFN width (a Mixtral-style model's
 * experts replace the dense FFN), and how the chosen weights are summed.
 * Routing: every MoE we read takes a softmax over all E router logits
 * and keeps the top k; Mixtral ("llama") then softmaxes the k chosen
 * logits, which equals renormalising the chosen probabilities, and
 * Qwen3-MoE renormalises when norm_topk_prob (llama.cpp's converter
 * writes it as expert_weights_norm; absent means true, as llama.cpp
 * builds qwen3moe).  A family may say otherwise (fmt_family.c). */
static int gguf_experts(fmt_src *s, const char *a, char *err, size_t errlen)
{
    fmt_hparams *h = &s->hp;
    int rc;
    if (h->n_experts == 0)
        return FMT_OK;
    h->expert_ffn_dim = h->ffn_dim;
    if ((rc = fmt_gguf_key_u32(s, "expert_feed_forward_length", &h->expert_ffn_dim, 0,
                               err, errlen)) < 0)
        return rc;
    /* Mixtral-style: the experts replace the dense FFN */
    if (!fmt_src_find(s, "blk.0.ffn_gate.weight"))
        h->ffn_dim = 0;
    /* renormalised unless expert_weights_norm says not */
    char wk[128];
    int norm = 1;
    snprintf(wk, sizeof wk, "%s.expert_weights_norm", a);
    if (fmt_kv_has(s->kv, wk) && fmt_kv_get_bool(s->kv, wk, &norm) < 0) {
        fmt_err(err, errlen, "%s: metadata %s is not a boolean", s->path, wk);
        return FMT_EFORMAT;
    }
    if (!norm)
        h->flags |= FMT_FLAG_MOE_NO_RENORM;
    return FMT_OK;
}

int fmt_src_gguf_open(fmt_src *s, char *err, size_t errlen)
{
    fmt_hparams *h = &s->hp;
    int rc = fmt_gguf_open(&s->gguf, s->path, err, errlen);
    if (rc < 0)
        return rc;
    s->kv = fmt_gguf_kv(s->gguf);
    size_t al;
    const char *arch = fmt_kv_get_str(s->kv, "general.architecture", &al);
    char nm[64], list[512];
    if (!arch) {
        fmt_err(err, errlen, "%s: no general.architecture", s->path);
        return FMT_EFORMAT;
    }
    const fmt_family *fam = fmt_family_by_arch(arch, al);
    if (!fam) {
        fmt_err(err, errlen, "%s: architecture '%s' is not supported (%s)", s->path,
                fmt_safe_name(nm, arch, al), fmt_family_list(list, sizeof list, 0));
        return FMT_EUNSUP;
    }
    memcpy(h->arch, arch, al);
    h->arch[al] = '\0';
    const char *a = h->arch;
    if ((rc = fmt_gguf_key_u32(s, "block_count", &h->n_layers, 1, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "embedding_length", &h->dim, 1, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "feed_forward_length", &h->ffn_dim, 1, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "attention.head_count", &h->n_heads, 1, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "context_length", &h->max_seq, 1, err, errlen)) < 0)
        return rc;
    h->n_kv_heads = h->n_heads;
    h->rope_theta = 10000.0f;
    h->norm_eps = 1e-5f;
    if ((rc = fmt_gguf_key_u32(s, "attention.head_count_kv", &h->n_kv_heads, 0, err,
                               errlen)) < 0 ||
        (rc = fmt_gguf_key_f32(s, "rope.freq_base", &h->rope_theta, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_f32(s, "attention.layer_norm_rms_epsilon", &h->norm_eps, err,
                               errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "expert_count", &h->n_experts, 0, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "expert_used_count", &h->top_k, 0, err, errlen)) < 0)
        return rc;
    h->head_dim = h->n_heads ? h->dim / h->n_heads : 0;
    uint32_t kl = 0, vl = 0, rd = 0;
    char mla_key[128];
    snprintf(mla_key, sizeof mla_key, "%s.attention.kv_lora_rank", a);
    if ((rc = fmt_gguf_key_u32(s, "attention.key_length", &kl, 0, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "attention.value_length", &vl, 0, err, errlen)) < 0 ||
        (rc = fmt_gguf_key_u32(s, "rope.dimension_count", &rd, 0, err, errlen)) < 0)
        return rc;
    if (kl)
        h->head_dim = kl;
    if (!kl && h->n_heads && h->dim % h->n_heads != 0) {
        fmt_err(err, errlen, "%s: embedding length %u is not a multiple of "
                "%u heads", s->path, h->dim, h->n_heads);
        return FMT_EFORMAT;
    }
    if (rd && rd != h->head_dim)
        h->rope_dims = rd;             /* partial RoPE (checked below) */
    if ((rc = gguf_experts(s, a, err, errlen)) < 0 ||
        (rc = gguf_vocab_size(s, a, err, errlen)) < 0)
        return rc;
    if ((rc = fmt_src_check_hparams(s, err, errlen)) < 0)
        return rc;
    /* conventions we do not implement, once the geometry is known sane
     * (MLA's values are its latent: value_length checked below) */
    if (vl && vl != h->head_dim && !fmt_kv_has(s->kv, mla_key)) {
        fmt_err(err, errlen, "%s: metadata %s.attention.value_length %u: a value length that "
                "differs from the key length %u is not implemented", s->path, a, vl,
                h->head_dim);
        return FMT_EUNSUP;
    }
    if (rd && rd != h->head_dim && fam->full_rope) {
        fmt_err(err, errlen, "%s: partial RoPE (%u of %u dimensions) in a %s model: llama.cpp "
                "refuses it too", s->path, rd, h->head_dim, a);
        return FMT_EUNSUP;
    }
    if (rd && (rd % 2 || rd > h->head_dim)) {
        fmt_err(err, errlen, "%s: metadata %s.rope.dimension_count %u: not even, or more than "
                "the %u dimensions of a head", s->path, a, rd, h->head_dim);
        return FMT_EFORMAT;
    }
    /* the family's own keys (its RoPE scaling among them), then Llama 3's
     * scaling where the file has it */
    if ((rc = fmt_family_apply(s, fam)) < 0 ||
        (rc = fam->gguf ? fam->gguf(s, err, errlen) : fmt_family_gguf_rope(s, err, errlen)) < 0 ||
        (rc = gguf_rope_scaling(s, a, err, errlen)) < 0 ||
        (rc = fmt_src_check_hparams(s, err, errlen)) < 0 ||
        (rc = fmt_src_fit_vocab(s, h->vocab_size, 0, 0, err, errlen)) < 0)
        return rc;
    if (vl && vl != h->head_dim && vl != h->mla_rank) {
        fmt_err(err, errlen, "%s: metadata %s.attention.value_length %u: not the latent's rank "
                "%u", s->path, a, vl, h->mla_rank);
        return FMT_EFORMAT;
    }
    const char *names[FMT_NROLES];
    fmt_family_names(&fmt_gguf_role_names, fam->gguf_names, names);
    return fmt_src_bind(s, names, 0, err, errlen);
}
