/*
 * test_llamacpp.c — converted GGUFs give llama.cpp's greedy tokens: a
 * Mixtral-style Q4_0 GGUF (issue 3, must show 4), and a GGUF of every GGML
 * type cflow keeps, made by llama.cpp's own llama-quantize (issue 41, must
 * show 1).
 *
 * llama.cpp is never built here.  It ran once on each GGUF, and its prompt
 * and generated token ids are recorded in tests/data/llamacpp/<case>.txt;
 * tests/data/llamacpp/README.md and tests/data/quant/README.md give the
 * exact commands.  A case names its GGUF either as a preset this test
 * regenerates (`cflow synth --gguf`, deterministic; FNV-1a 64 of the whole
 * file recorded beside the ids) or as a file committed under tests/data.
 * The test
 *   1. regenerates the GGUF and checks it is byte for byte the file
 *      llama.cpp ran (preset cases);
 *   2. converts it with `cflow convert` and reads every matrix back from its
 *      tiles as GGML blocks: each keeps its GGUF type, and its blocks are
 *      the GGUF's tensor bytes, bit for bit (no requantisation);
 *   3. tokenises the prompt and decodes greedily through the engine (first
 *      maximum wins ties, as llama.cpp's greedy sampler), comparing every
 *      prompt and generated id with llama.cpp's;
 *   4. runs `cflow run --temp 0` as a user would (on a committed GGUF
 *      itself, through the model cache, as `run -m x.gguf` converts) and
 *      checks its stdout is the text of llama.cpp's ids.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "format/cflow_format.h"
#include "testutil.h"

typedef struct rec {
    char     preset[64], vocab[256], prompt[256], seed[32], gguf[256], hf[256];
    uint64_t fnv;
    int32_t  prompt_ids[64], gen_ids[256];
    size_t   n_prompt, n_gen;
    uint32_t n_ctx;          /* the context llama.cpp ran at (0: any) */
    int      moe_modes;      /* run every expert I/O mode */
} rec;

static size_t parse_ids(const char *s, int32_t *out, size_t cap)
{
    size_t n = 0;
    char *end;
    for (;;) {
        long v = strtol(s, &end, 10);
        if (end == s || n == cap)
            break;
        out[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

static void load_rec(const char *name, rec *r)
{
    char path[4096];
    const char *src = getenv("CFLOW_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/data/llamacpp/%s.txt", src ? src : ".", name);
    char *txt = tu_read_file(path, NULL);
    if (!txt)
        fprintf(stderr, "cannot read %s\n", path);
    assert_non_null(txt);
    memset(r, 0, sizeof *r);
    for (char *save = NULL, *ln = strtok_r(txt, "\n", &save); ln;
         ln = strtok_r(NULL, "\n", &save)) {
        char *colon = strchr(ln, ':');
        if (ln[0] == '#' || !colon)
            continue;
        *colon = '\0';
        const char *v = colon + 1 + (colon[1] == ' ');
        if (!strcmp(ln, "preset"))
            snprintf(r->preset, sizeof r->preset, "%s", v);
        else if (!strcmp(ln, "gguf"))
            snprintf(r->gguf, sizeof r->gguf, "%s", v);
        else if (!strcmp(ln, "hf"))
            snprintf(r->hf, sizeof r->hf, "%s", v);
        else if (!strcmp(ln, "n_ctx"))
            r->n_ctx = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(ln, "modes"))
            r->moe_modes = !strcmp(v, "moe");
        else if (!strcmp(ln, "vocab"))
            snprintf(r->vocab, sizeof r->vocab, "%s", v);
        else if (!strcmp(ln, "seed"))
            snprintf(r->seed, sizeof r->seed, "%s", v);
        else if (!strcmp(ln, "prompt"))
            snprintf(r->prompt, sizeof r->prompt, "%s", v);
        else if (!strcmp(ln, "gguf_fnv64"))
            r->fnv = strtoull(v, NULL, 16);
        else if (!strcmp(ln, "prompt_ids"))
            r->n_prompt = parse_ids(v, r->prompt_ids, 64);
        else if (!strcmp(ln, "generated_ids"))
            r->n_gen = parse_ids(v, r->gen_ids, 256);
    }
    free(txt);
    assert_true(r->gguf[0] ? !r->preset[0]
                           : r->hf[0] || (r->preset[0] && r->vocab[0] && r->fnv));
    assert_true(r->prompt[0]);
    assert_true(r->n_prompt > 0);
    assert_true(r->n_gen >= 16);   /* the issue asks for at least 16 */
}

static uint64_t fnv64_file(const char *path)
{
    size_t n;
    char *b = tu_read_file(path, &n);
    assert_non_null(b);
    uint64_t h = tu_fnv64(0xcbf29ce484222325ull, b, n);
    free(b);
    return h;
}

/* tu_matrix_rows' callback: row r of the tiles against the GGUF's. */
typedef struct cmp_ctx {
    const uint8_t *want;     /* the tensor's bytes (this expert's) */
    size_t         row_bytes, bad;
    uint64_t       fnv;
} cmp_ctx;

static void cmp_row(void *ctx, uint32_t r, const uint8_t *row, size_t n)
{
    cmp_ctx *c = ctx;
    if (n != c->row_bytes || memcmp(row, c->want + (size_t)r * n, n))
        c->bad++;
    c->fnv = tu_fnv64(c->fnv, row, n);
}

/* The GGUF tensor name of a matrix id ("%u" the layer). */
static const char *const gguf_names[FMT_NMATRIX] = {
    [FMT_M_Q] = "blk.%u.attn_q.weight", [FMT_M_K] = "blk.%u.attn_k.weight",
    [FMT_M_V] = "blk.%u.attn_v.weight", [FMT_M_O] = "blk.%u.attn_output.weight",
    [FMT_M_GATE] = "blk.%u.ffn_gate.weight", [FMT_M_UP] = "blk.%u.ffn_up.weight",
    [FMT_M_DOWN] = "blk.%u.ffn_down.weight", [FMT_M_EXP_GATE] = "blk.%u.ffn_gate_exps.weight",
    [FMT_M_EXP_UP] = "blk.%u.ffn_up_exps.weight", [FMT_M_EXP_DOWN] = "blk.%u.ffn_down_exps.weight",
    [FMT_M_TOK_EMBD] = "token_embd.weight", [FMT_M_OUTPUT] = "output.weight",
    [FMT_M_SH_GATE] = "blk.%u.ffn_gate_shexp.weight", [FMT_M_SH_UP] = "blk.%u.ffn_up_shexp.weight",
    [FMT_M_SH_DOWN] = "blk.%u.ffn_down_shexp.weight",
    [FMT_M_K_B] = "blk.%u.attn_k_b.weight", [FMT_M_V_B] = "blk.%u.attn_v_b.weight",
    [FMT_M_Q_B] = "blk.%u.attn_q_b.weight",
};

/* The slot of a matrix id, and the table entry its slot is in (the
 * globals' for the vocabulary's). */
static int m_slot(unsigned mx)
{
    static const int slot[FMT_NMATRIX] = {
        [FMT_M_Q] = FMT_S_Q, [FMT_M_K] = FMT_S_K, [FMT_M_V] = FMT_S_V, [FMT_M_O] = FMT_S_O,
        [FMT_M_GATE] = FMT_S_GATE, [FMT_M_UP] = FMT_S_UP, [FMT_M_DOWN] = FMT_S_DOWN,
        [FMT_M_EXP_GATE] = FMT_S_EXP_GATE, [FMT_M_EXP_UP] = FMT_S_EXP_UP,
        [FMT_M_EXP_DOWN] = FMT_S_EXP_DOWN, [FMT_M_TOK_EMBD] = FMT_S_TOK_EMBD,
        [FMT_M_OUTPUT] = FMT_S_OUTPUT, [FMT_M_SH_GATE] = FMT_S_SH_GATE,
        [FMT_M_SH_UP] = FMT_S_SH_UP, [FMT_M_SH_DOWN] = FMT_S_SH_DOWN,
        [FMT_M_K_B] = FMT_S_K_B, [FMT_M_V_B] = FMT_S_V_B, [FMT_M_Q_B] = FMT_S_Q_B,
    };
    return slot[mx];
}

static unsigned m_entry(const fmt_model *m, unsigned mx, unsigned l)
{
    return mx == FMT_M_TOK_EMBD || mx == FMT_M_OUTPUT ? fmt_model_hparams(m)->n_layers : l;
}

/* The GGUF tensor matrix mx of layer l comes from, its name into tn, and
 * its first row there (*r0): its own tensor, or a fused one's rows (Phi-3's
 * attn_qkv: Q, K, V; its ffn_up of 2 ffn rows: gate, then up); DeepSeek-V2's
 * QKV stream holds attn_q or attn_q_a, and attn_kv_a_mqa. */
static const fmt_tensor *fused_part(const fmt_gguf *g, const fmt_model *m, unsigned mx,
                                    unsigned l, char *tn, size_t tl, uint64_t *r0)
{
    const fmt_hparams *hp = fmt_model_hparams(m);
    const fmt_layer_geom *lg = fmt_model_layer_geom(m, l);
    const uint64_t q = (uint64_t)lg->n_heads * lg->head_dim,
                   kv = (uint64_t)lg->n_kv_heads * lg->head_dim;
    char fn[96];
    *r0 = 0;
    snprintf(tn, tl, gguf_names[mx], l);
    if ((mx == FMT_M_Q || mx == FMT_M_K) && hp->mla_rank) {
        snprintf(tn, tl, mx == FMT_M_K ? "blk.%u.attn_kv_a_mqa.weight"
                         : hp->mla_q_rank ? "blk.%u.attn_q_a.weight" : "blk.%u.attn_q.weight", l);
    } else if (mx == FMT_M_Q || mx == FMT_M_K || mx == FMT_M_V) {
        snprintf(fn, sizeof fn, "blk.%u.attn_qkv.weight", l);
        if (!fmt_gguf_find(g, tn) && fmt_gguf_find(g, fn)) {
            *r0 = mx == FMT_M_Q ? 0 : mx == FMT_M_K ? q : q + kv;
            snprintf(tn, tl, "%s", fn);
        }
    } else if (mx == FMT_M_GATE || mx == FMT_M_UP) {
        snprintf(fn, sizeof fn, "blk.%u.ffn_gate.weight", l);
        if (!fmt_gguf_find(g, fn)) {
            *r0 = mx == FMT_M_GATE ? 0 : hp->ffn_dim;
            snprintf(tn, tl, "blk.%u.ffn_up.weight", l);
        }
    }
    return fmt_gguf_find(g, tn);
}

/* Every matrix of stream st (of layer l, expert e or -1) against the GGUF:
 * its tile type keeps the tensor's type, its blocks are the tensor's
 * bytes.  Returns the matrices checked. */
static unsigned blocks_match(const fmt_gguf *g, const fmt_model *m, const fmt_stream *st,
                             unsigned l, int e, const char *name)
{
    unsigned seen = 0, done = 0;
    for (uint32_t i = 0; st && i < st->n_tiles; i++) {
        unsigned mx = st->tiles[i].matrix;
        if (seen >> mx & 1)
            continue;
        seen |= 1u << mx;
        char tn[96];
        uint64_t r0 = 0;
        const fmt_tensor *t = fused_part(g, m, mx, l, tn, sizeof tn, &r0);
        assert_non_null(t);
        assert_int_equal(st->tiles[i].type, fmt_dtype_tile(t->dtype));
        const fmt_matinfo *mi = fmt_model_matinfo(m, m_entry(m, mx, l), m_slot(mx));
        assert_non_null(mi);
        uint32_t rows = mi->rows, cols = (uint32_t)t->ne[0];
        cmp_ctx c = { (const uint8_t *)t->data, (size_t)fmt_dtype_size(t->dtype, cols), 0,
                      0xcbf29ce484222325ull };
        c.want += (size_t)r0 * c.row_bytes;
        if (e >= 0)
            c.want += (size_t)e * rows * c.row_bytes;
        assert_int_equal(tu_matrix_rows(st, (int)mx, rows, cols, cmp_row, &c), 0);
        if (c.bad)
            fprintf(stderr, "%s: %s%s: %zu of %u rows differ from the GGUF's blocks\n",
                    name, tn, e >= 0 ? " (an expert)" : "", c.bad, rows);
        assert_int_equal(c.bad, 0);
        done++;
    }
    return done;
}

/* Step 2: every matrix of the .cflow made from gguf is the GGUF's. */
static void check_blocks(const char *name, const char *gguf, const char *model)
{
    char err[512];
    fmt_gguf *g = NULL;
    fmt_model *m = NULL;
    assert_int_equal(fmt_gguf_open(&g, gguf, err, sizeof err), 0);
    assert_int_equal(fmt_model_open(&m, model, err, sizeof err), 0);
    const fmt_hparams *hp = fmt_model_hparams(m);
    unsigned n = 0;
    static const int lslots[] = { FMT_S_Q, FMT_S_O, FMT_S_GATE, FMT_S_DOWN, FMT_S_SH_GATE,
                                  FMT_S_SH_DOWN, FMT_S_K_B, FMT_S_V_B, FMT_S_Q_B };
    for (unsigned l = 0; l < hp->n_layers; l++) {
        for (unsigned s = 0; s < sizeof lslots / sizeof *lslots; s++)
            n += blocks_match(g, m, fmt_model_stream(m, l, lslots[s]), l, -1, name);
        /* (DeepSeek's leading layers have none) */
        for (unsigned e = 0; fmt_layer_moe(hp, fmt_model_layer_geom(m, l), l) &&
                             e < hp->n_experts; e++) {
            const fmt_stream *gu = NULL, *dn = NULL;
            assert_int_equal(fmt_model_expert(m, l, e, &gu, &dn, NULL, NULL), 0);
            n += blocks_match(g, m, gu, l, (int)e, name) + blocks_match(g, m, dn, l, (int)e,
                                                                           name);
        }
    }
    n += blocks_match(g, m, fmt_model_stream(m, hp->n_layers, FMT_S_TOK_EMBD), 0, -1, name);
    n += blocks_match(g, m, fmt_model_stream(m, hp->n_layers, FMT_S_OUTPUT), 0, -1, name);
    fprintf(stderr, "%s: %u matrices of %s copied bit for bit\n", name, n, gguf);
    assert_true(n >= 1 + 7 * (hp->n_experts ? 0 : hp->n_layers));
    fmt_model_close(m);
    fmt_gguf_close(g);
}

/* An expert I/O setting (the MoE families run under each). */
typedef struct xio_mode {
    const char *what;
    int         io, prefetch, ahead;
    int64_t     cache;
} xio_mode;
static const xio_mode xio_modes[] = {
    { "mmap+prefetch", ENG_XIO_MMAP, 1, 0, 0 },
    { "sync", ENG_XIO_SYNC, 0, 0, 0 },
    { "staged", ENG_XIO_STAGED, 0, 0, 0 },
    { "sync+cache", ENG_XIO_SYNC, 0, 0, 1 << 20 },
    { "staged+cache", ENG_XIO_STAGED, 0, 0, 1 << 20 },
    { "staged+cache+ahead", ENG_XIO_STAGED, 0, 1, 1 << 20 },
};

/* Step 3: model, opened with mode's expert I/O (NULL: the defaults, mmap),
 * gives r's prompt ids for its prompt (a batched prefill) and llama.cpp's
 * greedy ids after it, first maximum winning ties as llama.cpp's greedy
 * sampler. */
static void greedy_matches(const char *name, const char *model, const rec *r,
                           const xio_mode *mode)
{
    eng_opts o;
    eng_session *s = NULL;
    char err[512];
    eng_opts_default(&o);
    o.n_threads = 2;
    o.n_ctx = r->n_ctx;
    if (mode) {
        o.expert_io = mode->io;
        o.prefetch = mode->prefetch;
        o.expert_cache = mode->cache;
        o.expert_ahead = mode->ahead;
    }
    if (eng_open(&s, model, &o, err, sizeof err))
        fprintf(stderr, "%s\n", err);
    assert_non_null(s);
    if (mode)
        assert_int_equal(eng_expert_io(s), mode->io);
    const eng_tok *tok = eng_tokenizer(s);
    int32_t ids[64];
    size_t n = 0;
    assert_int_equal(eng_tok_encode(tok, r->prompt, strlen(r->prompt), 1, 1, ids, 64, &n), 0);
    assert_int_equal(n, r->n_prompt);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids[i], r->prompt_ids[i]);
    assert_int_equal(eng_prefill(s, ids, n, err, sizeof err), 0);
    uint32_t nv = eng_hparams(s)->vocab_size;
    size_t agree = 0;
    for (size_t k = 0; k < r->n_gen; k++) {
        const float *lg = eng_logits(s);
        int32_t best = 0;
        for (uint32_t v = 1; v < nv; v++)
            if (lg[v] > lg[best])
                best = (int32_t)v;
        if (best != r->gen_ids[k]) {
            fprintf(stderr, "%s%s%s: token %zu: cflow %d, llama.cpp %d (after %zu equal)\n",
                    name, mode ? " " : "", mode ? mode->what : "", k, best, r->gen_ids[k],
                    agree);
            break;
        }
        agree++;
        assert_int_equal(eng_decode(s, best, err, sizeof err), 0);
    }
    eng_close(s);
    assert_int_equal(agree, r->n_gen);
}

static void check_case(const char *name)
{
    rec r;
    tu_proc p;
    char err[512];
    load_rec(name, &r);
    char gguf[4096], model[4096];
    snprintf(model, sizeof model, "%s", tu_tmp("llamacpp.cflow"));

    const char *src = getenv("CFLOW_SRCDIR");
    char hf[4096];
    snprintf(hf, sizeof hf, "%s/tests/data/%s", src ? src : ".", r.hf);
    if (!r.gguf[0] && !r.preset[0]) {
        /* a Hugging Face folder alone: the ids of the GGUF llama.cpp's
         * converter rules make of it (tests/data/families) */
        assert_int_equal(tu_cflow_run(&p, "convert", hf, model, (char *)NULL), 0);
        if (p.status)
            fprintf(stderr, "%s", p.err);
        assert_int_equal(p.status, 0);
        tu_proc_free(&p);
        snprintf(gguf, sizeof gguf, "%s", model);
    } else if (r.gguf[0]) {
        snprintf(gguf, sizeof gguf, "%s/tests/data/%s", src ? src : ".", r.gguf);
    } else {
        /* 1: the same file llama.cpp ran */
        const char *vocab = tu_shared(r.vocab);
        tu_require(vocab);
        snprintf(gguf, sizeof gguf, "%s", tu_tmp("llamacpp.gguf"));
        assert_int_equal(tu_cflow_run(&p, "synth", "--gguf", "--vocab", vocab, "--seed",
                                      r.seed, r.preset, gguf, (char *)NULL), 0);
        if (p.status)
            fprintf(stderr, "%s", p.err);
        assert_int_equal(p.status, 0);
        tu_proc_free(&p);
        uint64_t h = fnv64_file(gguf);
        if (h != r.fnv)
            fprintf(stderr, "%s: regenerated GGUF differs from the one llama.cpp ran "
                    "(fnv64 %016llx, recorded %016llx)\n", name, (unsigned long long)h,
                    (unsigned long long)r.fnv);
        assert_true(h == r.fnv);
    }

    /* 2: convert, every block copied */
    if (r.gguf[0] || r.preset[0]) {
        assert_int_equal(tu_cflow_run(&p, "convert", gguf, model, (char *)NULL), 0);
        if (p.status)
            fprintf(stderr, "%s", p.err);
        assert_int_equal(p.status, 0);
        tu_proc_free(&p);
        check_blocks(name, gguf, model);
    }

    /* 3: token for token through the engine; a MoE family in every expert
     * I/O mode; the same folder as Hugging Face gives it too */
    greedy_matches(name, model, &r, NULL);
    for (size_t i = 0; r.moe_modes && i < sizeof xio_modes / sizeof *xio_modes; i++)
        greedy_matches(name, model, &r, &xio_modes[i]);
    if (r.hf[0] && (r.gguf[0] || r.preset[0])) {
        char hm[4096];
        snprintf(hm, sizeof hm, "%s", tu_tmp("hf.cflow"));
        assert_int_equal(tu_cflow_run(&p, "convert", hf, hm, (char *)NULL), 0);
        if (p.status)
            fprintf(stderr, "%s", p.err);
        assert_int_equal(p.status, 0);
        tu_proc_free(&p);
        greedy_matches(r.hf, hm, &r, NULL);
    }

    /* 4: `cflow run` prints the text of those ids (a committed GGUF run as
     * it is: converted into a private model cache) */
    char nbuf[16], cache_env[4200];
    snprintf(nbuf, sizeof nbuf, "%zu", r.n_gen);
    snprintf(cache_env, sizeof cache_env, "XDG_CACHE_HOME=%s", tu_tmp("cache"));
    char *const envv[] = { cache_env, NULL };
    char cbuf[16];
    snprintf(cbuf, sizeof cbuf, "%u", r.n_ctx);
    assert_int_equal(tu_cflow_env(&p, envv, "run", "-m",
                                  r.gguf[0] ? gguf : r.preset[0] ? model : hf, "-p",
                                  r.prompt, "-n", nbuf, "-c", cbuf, "--temp", "0", "--no-log",
                                  "--ignore-eos", (char *)NULL), 0);
    if (p.status)
        fprintf(stderr, "%s", p.err);
    assert_int_equal(p.status, 0);
    /* expected text: the pieces of llama.cpp's ids, detokenised */
    eng_tok *t2 = NULL;
    fmt_model *fm = NULL;
    assert_int_equal(fmt_model_open(&fm, model, err, sizeof err), 0);
    assert_int_equal(eng_tok_load(&t2, fmt_model_kv(fm), err, sizeof err), 0);
    size_t cap = r.n_gen * 3 * (eng_tok_max_piece(t2) + 4) + 64, len = 0;
    char *want = malloc(cap);
    assert_non_null(want);
    eng_detok d;
    eng_detok_init(&d);
    d.prev = r.prompt_ids[r.n_prompt - 1];
    for (size_t k = 0; k < r.n_gen; k++)
        if (!eng_tok_is_control(t2, r.gen_ids[k]))
            len += eng_detok_push(&d, t2, r.gen_ids[k], want + len, cap - len);
    len += eng_detok_flush(&d, want + len, cap - len);
    want[len] = '\0';
    if (strcmp(p.out, want))
        fprintf(stderr, "cflow run printed\n[%s]\nwanted\n[%s]\n", p.out, want);
    assert_string_equal(p.out, want);
    free(want);
    eng_tok_free(t2);
    fmt_model_close(fm);
    tu_proc_free(&p);
}

static void test_tiny_mixtral(void **state)
{
    (void)state;
    check_case("tiny-mixtral");
}

/* The model families (issue 42), each as `cflow synth --gguf` writes it in
 * its own architecture: Phi-3's LongRoPE within its original context and
 * past it (short and long divisors), the MoE families in every expert I/O
 * mode. */
#define FAMILY_CASE(fn, rec) \
    static void test_##fn(void **state) { (void)state; check_case(rec); }
FAMILY_CASE(tiny_olmoe, "tiny-olmoe")
FAMILY_CASE(tiny_phi, "tiny-phi")
FAMILY_CASE(tiny_phi_long, "tiny-phi-long")
FAMILY_CASE(tiny_gemma2, "tiny-gemma2")
FAMILY_CASE(tiny_gemma3, "tiny-gemma3")
FAMILY_CASE(tiny_gptoss, "tiny-gptoss")
/* a prompt of 29 tokens over windows of 8: the batched prefill wraps the
 * sliding layers' rings inside a chunk */
FAMILY_CASE(tiny_gemma2_long, "tiny-gemma2-long")
FAMILY_CASE(tiny_gptoss_long, "tiny-gptoss-long")
/* DeepSeek-V2 with a low-rank query and grouped experts; V2-Lite's direct
 * query (llama.cpp reads it in 27-layer models only) */
FAMILY_CASE(tiny_deepseek2, "tiny-deepseek2")
FAMILY_CASE(tiny_deepseek2_lite, "tiny-deepseek2-lite")

/* A family's fixture from llama.cpp's tools (tests/data/families: gguf-py
 * wrote its f32 GGUF beside a Hugging Face folder of the same weights,
 * llama-quantize quantised it): the quantised GGUF, and the folder, which
 * must give llama.cpp's ids of the f32 GGUF. */
FAMILY_CASE(fam_olmoe_q4_0, "fam-olmoe-q4_0")
FAMILY_CASE(fam_olmoe_hf, "fam-olmoe-hf")
FAMILY_CASE(fam_phi3_q8_0, "fam-phi3-q8_0")
FAMILY_CASE(fam_phi3_hf, "fam-phi3-hf")
FAMILY_CASE(fam_gemma2_q8_0, "fam-gemma2-q8_0")
FAMILY_CASE(fam_gemma2_hf, "fam-gemma2-hf")
FAMILY_CASE(fam_gemma3_q4_k_m, "fam-gemma3-q4_k_m")
FAMILY_CASE(fam_gemma3_hf, "fam-gemma3-hf")
FAMILY_CASE(fam_gptoss_mxfp4, "fam-gptoss-mxfp4_moe")
FAMILY_CASE(fam_gptoss_hf, "fam-gptoss-hf")
FAMILY_CASE(fam_deepseek2_q4_k_m, "fam-deepseek2-q4_k_m")
FAMILY_CASE(fam_deepseek2_hf, "fam-deepseek2-hf")

/* One llama-quantize fixture a test: each GGML type on its own. */
#define QUANT_CASE(t) \
    static void test_quant_##t(void **state) { (void)state; check_case("quant-" #t); }
QUANT_CASE(q2_k)
QUANT_CASE(q3_k)
QUANT_CASE(q4_k)
QUANT_CASE(q5_k)
QUANT_CASE(q6_k)
QUANT_CASE(iq4_xs)
QUANT_CASE(q4_k_m)
QUANT_CASE(q4_1)
QUANT_CASE(q5_0)
QUANT_CASE(q5_1)
QUANT_CASE(iq4_nl)
QUANT_CASE(mxfp4)
QUANT_CASE(bf16)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_mixtral),
        cmocka_unit_test(test_tiny_olmoe), cmocka_unit_test(test_tiny_phi),
        cmocka_unit_test(test_tiny_phi_long), cmocka_unit_test(test_tiny_gemma2),
        cmocka_unit_test(test_tiny_gemma3), cmocka_unit_test(test_tiny_gptoss),
        cmocka_unit_test(test_tiny_gemma2_long), cmocka_unit_test(test_tiny_gptoss_long),
        cmocka_unit_test(test_tiny_deepseek2), cmocka_unit_test(test_tiny_deepseek2_lite),
        cmocka_unit_test(test_fam_olmoe_q4_0), cmocka_unit_test(test_fam_olmoe_hf),
        cmocka_unit_test(test_fam_phi3_q8_0), cmocka_unit_test(test_fam_phi3_hf),
        cmocka_unit_test(test_fam_gemma2_q8_0), cmocka_unit_test(test_fam_gemma2_hf),
        cmocka_unit_test(test_fam_gemma3_q4_k_m), cmocka_unit_test(test_fam_gemma3_hf),
        cmocka_unit_test(test_fam_gptoss_mxfp4), cmocka_unit_test(test_fam_gptoss_hf),
        cmocka_unit_test(test_fam_deepseek2_q4_k_m), cmocka_unit_test(test_fam_deepseek2_hf),
        cmocka_unit_test(test_quant_q2_k), cmocka_unit_test(test_quant_q3_k),
        cmocka_unit_test(test_quant_q4_k), cmocka_unit_test(test_quant_q5_k),
        cmocka_unit_test(test_quant_q6_k), cmocka_unit_test(test_quant_iq4_xs),
        cmocka_unit_test(test_quant_q4_k_m), cmocka_unit_test(test_quant_q4_1),
        cmocka_unit_test(test_quant_q5_0), cmocka_unit_test(test_quant_q5_1),
        cmocka_unit_test(test_quant_iq4_nl), cmocka_unit_test(test_quant_mxfp4),
        cmocka_unit_test(test_quant_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
