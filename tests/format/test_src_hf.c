/*
 * test_src_hf.c — Hugging Face directories seen through fmt_src.
 *
 * The directories are generated here from stories260K.bin's weights:
 * config.json + model.safetensors (BF16 / F32), Q and K permuted into
 * HF's split-half layout exactly as transformers' conversion script does;
 * single file, sharded with an index, Qwen2 with biases, a padded
 * vocabulary; then damaged safetensors headers, configs and indexes, and
 * pipeline configs the .cflow reader would refuse.
 */
#include "config.h"

#include "src_test.h"

static uint64_t nel(const fmt_tensor *t)
{
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

static float *deq(const fmt_tensor *t)
{
    float *y = malloc(nel(t) * sizeof *y);
    assert_int_equal(fmt_dequant(t->dtype, t->data, y, nel(t)), 0);
    return y;
}

static uint16_t to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    b += 0x7FFF + ((b >> 16) & 1);
    return (uint16_t)(b >> 16);
}

static float bf16_round(float f)
{
    uint32_t b = (uint32_t)to_bf16(f) << 16;
    float r;
    memcpy(&r, &b, 4);
    return r;
}

/* ---- Hugging Face directories ------------------------------------------ */
typedef struct st_ent {
    char        name[96];
    const char *dtype;      /* "F32", "BF16", "I64", ... */
    unsigned    nd;
    uint64_t    shape[3];
    uint8_t    *data;
    size_t      nbytes;
} st_ent;

typedef struct hfopt {
    int         qwen;         /* Qwen2ForCausalLM with biases */
    int         bf16;         /* matrices in BF16 (norms stay F32) */
    int         lm_head;      /* write lm_head.weight, tie false */
    int         shards;       /* 0: model.safetensors; 2: two shards */
    unsigned    vocab_pad;    /* extra embedding rows (zeros) */
    const char *drop;         /* tensor left out */
    const char *i64;          /* tensor stored as I64 (same bytes) */
    const char *cfg_extra;    /* raw JSON members added to config.json */
    const char *arch;         /* architectures[0] override */
    int         no_config_key;/* drop hidden_size */
} hfopt;

/* Meta (adjacent pairs) row -> HF (split halves) row, per head:
 * w.view(n_heads, hd/2, 2, dim).transpose(1, 2).reshape(rows, dim) puts
 * Meta row h*hd + 2i + p at HF row h*hd + p*hd/2 + i. */
static unsigned meta_row_of_hf(unsigned r, unsigned hd)
{
    unsigned h = r / hd, j = r % hd, p = j / (hd / 2), i = j % (hd / 2);
    return h * hd + 2 * i + p;
}

static void st_write(const char *path, st_ent *e, size_t n)
{
    size_t cap = 64 + n * 256, o = 0;
    char *hdr = malloc(cap);
    o += (size_t)snprintf(hdr + o, cap - o,
                          "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        o += (size_t)snprintf(hdr + o, cap - o,
                              ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e[i].name,
                              e[i].dtype);
        for (unsigned d = 0; d < e[i].nd; d++)
            o += (size_t)snprintf(hdr + o, cap - o, "%s%llu", d ? "," : "",
                                  (unsigned long long)e[i].shape[d]);
        o += (size_t)snprintf(hdr + o, cap - o,
                              "],\"data_offsets\":[%llu,%llu]}",
                              (unsigned long long)off,
                              (unsigned long long)(off + e[i].nbytes));
        off += e[i].nbytes;
    }
    o += (size_t)snprintf(hdr + o, cap - o, "}");
    while (o % 8)
        hdr[o++] = ' ';
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t hl = o;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, o, f);
    for (size_t i = 0; i < n; i++)
        fwrite(e[i].data, 1, e[i].nbytes, f);
    assert_int_equal(fclose(f), 0);
    free(hdr);
}

/* The entries e[n] as one model.safetensors in dir, or (shards) as two
 * halves with the index that maps each name to its file. */
static void write_tensors(const char *dir, st_ent *e, size_t n, int shards)
{
    char path[1024];
    if (shards == 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st_write(path, e, n);
    } else {
        size_t half = n / 2;
        snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors",
                 dir);
        st_write(path, e, half);
        snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors",
                 dir);
        st_write(path, e + half, n - half);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        FILE *f = fopen(path, "w");
        fprintf(f, "{\"metadata\":{\"total_size\":0},\"weight_map\":{");
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%s\"%s\":\"model-0000%d-of-00002.safetensors\"",
                    i ? "," : "", e[i].name, i < half ? 1 : 2);
        fprintf(f, "}}\n");
        fclose(f);
    }
}

/* dir/config.json for l2c's geometry h and the options of op. */
static void write_config(const char *dir, const fmt_hparams *h, const hfopt *op)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\n  \"architectures\": [\"%s\"],\n",
            op->arch ? op->arch
                     : op->qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
    if (!op->no_config_key)
        fprintf(f, "  \"hidden_size\": %u,\n", h->dim);
    fprintf(f, "  \"intermediate_size\": %u,\n  \"num_hidden_layers\": %u,\n"
               "  \"num_attention_heads\": %u,\n"
               "  \"num_key_value_heads\": %u,\n"
               "  \"max_position_embeddings\": %u,\n"
               "  \"vocab_size\": %u,\n  \"rms_norm_eps\": 1e-05,\n"
               "  \"rope_theta\": 10000.0,\n  \"hidden_act\": \"silu\",\n"
               "  \"rope_scaling\": null,\n"
               "  \"tie_word_embeddings\": %s%s%s\n}\n",
            h->ffn_dim, h->n_layers, h->n_heads, h->n_kv_heads, h->max_seq,
            h->vocab_size + op->vocab_pad, op->lm_head ? "false" : "true",
            op->cfg_extra ? ",\n" : "", op->cfg_extra ? op->cfg_extra : "");
    fclose(f);
}

/* Build an HF directory at dir from the llama2.c source. */
static void make_hf(const char *dir, const fmt_src *l2c, const hfopt *op)
{
    const fmt_hparams *h = fmt_src_hparams(l2c);
    static const struct { int role; const char *pat; } map[] = {
        { FMT_R_ATTN_NORM, "model.layers.%u.input_layernorm.weight" },
        { FMT_R_Q, "model.layers.%u.self_attn.q_proj.weight" },
        { FMT_R_K, "model.layers.%u.self_attn.k_proj.weight" },
        { FMT_R_V, "model.layers.%u.self_attn.v_proj.weight" },
        { FMT_R_O, "model.layers.%u.self_attn.o_proj.weight" },
        { FMT_R_FFN_NORM, "model.layers.%u.post_attention_layernorm.weight" },
        { FMT_R_GATE, "model.layers.%u.mlp.gate_proj.weight" },
        { FMT_R_UP, "model.layers.%u.mlp.up_proj.weight" },
        { FMT_R_DOWN, "model.layers.%u.mlp.down_proj.weight" },
    };
    st_ent *e = calloc(256, sizeof *e);
    size_t n = 0;
    mkdir(dir, 0700);
    /* (role, layer) list: globals first */
    struct { int role; unsigned layer; char name[96]; } lst[128];
    size_t nl = 0;
    lst[nl].role = FMT_R_TOK_EMBD;
    snprintf(lst[nl++].name, 96, "model.embed_tokens.weight");
    for (unsigned l = 0; l < h->n_layers; l++)
        for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
            lst[nl].role = map[k].role;
            lst[nl].layer = l;
            snprintf(lst[nl++].name, 96, map[k].pat, l);
        }
    lst[nl].role = FMT_R_OUT_NORM;
    snprintf(lst[nl++].name, 96, "model.norm.weight");
    if (op->lm_head) {
        lst[nl].role = FMT_R_OUTPUT;  /* the tied embedding, stored twice */
        snprintf(lst[nl++].name, 96, "lm_head.weight");
    }
    for (size_t i = 0; i < nl; i++) {
        if (op->drop && strcmp(op->drop, lst[i].name) == 0)
            continue;
        int role = lst[i].role == FMT_R_OUTPUT ? FMT_R_TOK_EMBD : lst[i].role;
        const fmt_tensor *t = fmt_src_tensor(l2c, role, lst[i].layer);
        assert_non_null(t);
        unsigned rows = (unsigned)t->ne[1], cols = (unsigned)t->ne[0];
        unsigned out_rows = rows;
        if (role == FMT_R_TOK_EMBD)
            out_rows += op->vocab_pad;
        st_ent *s = &e[n++];
        snprintf(s->name, sizeof s->name, "%s", lst[i].name);
        int is_mat = t->ndim == 2;
        int bf = op->bf16 && is_mat;
        s->dtype = op->i64 && strcmp(op->i64, s->name) == 0 ? "I64"
                   : bf ? "BF16" : "F32";
        s->nd = is_mat ? 2 : 1;
        s->shape[0] = is_mat ? out_rows : cols;
        s->shape[1] = cols;
        size_t es = bf ? 2 : 4;
        if (strcmp(s->dtype, "I64") == 0) /* 8-byte elements: half as many */
            s->shape[s->nd - 1] = cols / 2;
        s->nbytes = (size_t)out_rows * cols * es;
        s->data = calloc(1, s->nbytes);
        const float *src = t->data;
        unsigned hd = h->head_dim;
        for (unsigned r = 0; r < rows; r++) {
            unsigned sr = r;
            if (role == FMT_R_Q || role == FMT_R_K)
                sr = meta_row_of_hf(r, hd);
            for (unsigned c = 0; c < cols; c++) {
                float v;
                memcpy(&v, src + (size_t)sr * cols + c, 4);
                if (bf) {
                    uint16_t b = to_bf16(v);
                    memcpy(s->data + ((size_t)r * cols + c) * 2, &b, 2);
                } else {
                    memcpy(s->data + ((size_t)r * cols + c) * 4, &v, 4);
                }
            }
        }
    }
    if (op->qwen) {
        for (unsigned l = 0; l < h->n_layers; l++) {
            static const char *nm[] = { "q", "k", "v" };
            for (int k = 0; k < 3; k++) {
                st_ent *s = &e[n++];
                unsigned len = k == 0 ? h->n_heads * h->head_dim
                                      : h->n_kv_heads * h->head_dim;
                snprintf(s->name, sizeof s->name,
                         "model.layers.%u.self_attn.%s_proj.bias", l, nm[k]);
                s->dtype = "F32";
                s->nd = 1;
                s->shape[0] = len;
                s->nbytes = len * 4;
                s->data = malloc(s->nbytes);
                for (unsigned i = 0; i < len; i++) {
                    float v = (float)(l * 100 + (unsigned)k * 10) + (float)i;
                    memcpy(s->data + i * 4, &v, 4);
                }
            }
        }
    }
    write_tensors(dir, e, n, op->shards);
    write_config(dir, h, op);
    for (size_t i = 0; i < n; i++)
        free(e[i].data);
    free(e);
}

/* Compare every role of an HF source with the llama2.c one. */
static void check_hf(const fmt_src *hf, const fmt_src *l2c, int bf16)
{
    const fmt_hparams *a = fmt_src_hparams(hf), *b = fmt_src_hparams(l2c);
    assert_int_equal(a->n_layers, b->n_layers);
    assert_int_equal(a->dim, b->dim);
    assert_int_equal(a->ffn_dim, b->ffn_dim);
    assert_int_equal(a->n_heads, b->n_heads);
    assert_int_equal(a->n_kv_heads, b->n_kv_heads);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->max_seq, b->max_seq);
    assert_true(a->norm_eps == 1e-5f);
    assert_true(a->rope_theta == 10000.0f);
    assert_true(a->flags & FMT_FLAG_ROPE_NEOX);
    int n_checked = 0;
    for (int r = 0; r < FMT_NROLES; r++) {
        if (r == FMT_R_OUTPUT || r == FMT_R_Q_BIAS || r == FMT_R_K_BIAS ||
            r == FMT_R_V_BIAS)
            continue;
        for (unsigned l = 0; l < a->n_layers; l++) {
            const fmt_tensor *x = fmt_src_tensor(hf, r, l);
            const fmt_tensor *y = fmt_src_tensor(l2c, r, l);
            assert_true((x == NULL) == (y == NULL));
            if (!x)
                continue;
            assert_int_equal(x->ndim, y->ndim);
            assert_memory_equal(x->ne, y->ne, sizeof x->ne);
            assert_int_equal(x->dtype,
                             bf16 && x->ndim == 2 ? FMT_DT_BF16 : FMT_DT_F32);
            float *xv = deq(x), *yv = deq(y);
            unsigned rows = (unsigned)x->ne[1], cols = (unsigned)x->ne[0];
            for (unsigned i = 0; i < rows; i++) {
                unsigned si = (r == FMT_R_Q || r == FMT_R_K)
                              ? meta_row_of_hf(i, a->head_dim) : i;
                for (unsigned c = 0; c < cols; c++) {
                    float want = yv[(size_t)si * cols + c];
                    if (bf16 && x->ndim == 2)
                        want = bf16_round(want);
                    if (xv[(size_t)i * cols + c] != want)
                        fail_msg("%s[%u][%u]: %g != %g", x->name, i, c,
                                 xv[(size_t)i * cols + c], want);
                }
            }
            /* the permutation really moved rows of Q and K */
            if (r == FMT_R_Q && !bf16)
                assert_true(memcmp(x->data, y->data, x->nbytes) != 0);
            free(xv);
            free(yv);
            n_checked++;
        }
    }
    assert_true(n_checked >= 9 * 5);
}

static void test_hf(void **state)
{
    (void)state;
    const char *bin = tu_shared_file("models/stories260K.bin");
    const char *tok = tu_shared_file("models/tok512.bin");
    fmt_src *l2c = open_ok(bin, tok);

    /* BF16 matrices, tied, one file */
    hfopt o1 = { .bf16 = 1 };
    make_hf(tu_tmp("hf-bf16"), l2c, &o1);
    fmt_src *s = open_ok(tu_tmp("hf-bf16"), tok);
    assert_string_equal(fmt_src_kind(s), "hf");
    assert_string_equal(fmt_src_hparams(s)->arch, "llama");
    assert_true(fmt_src_hparams(s)->flags & FMT_FLAG_TIED);
    assert_null(fmt_src_tensor(s, FMT_R_OUTPUT, 0));
    assert_int_equal(fmt_src_hparams(s)->vocab_size, 512);
    check_hf(s, l2c, 1);
    size_t len;
    const char *nm = fmt_kv_get_str(fmt_src_kv(s), "general.architecture",
                                    &len);
    assert_non_null(nm);
    assert_int_equal(fmt_kv_arr_len(fmt_src_kv(s), "tokenizer.ggml.tokens"),
                     512);
    fmt_src_close(s);

    /* F32, separate lm_head, sharded over two files with an index */
    hfopt o2 = { .lm_head = 1, .shards = 2 };
    make_hf(tu_tmp("hf-shards"), l2c, &o2);
    s = open_ok(tu_tmp("hf-shards"), tok);
    assert_int_equal(fmt_src_hparams(s)->flags & FMT_FLAG_TIED, 0);
    const fmt_tensor *out = fmt_src_tensor(s, FMT_R_OUTPUT, 0);
    assert_non_null(out);
    assert_string_equal(out->name, "lm_head.weight");
    check_hf(s, l2c, 0);
    fmt_src_close(s);
    /* the same with tie_word_embeddings true: the head is ignored */
    hfopt o2b = { .lm_head = 1, .cfg_extra = "\"tie_word_embeddings\": true" };
    make_hf(tu_tmp("hf-tie"), l2c, &o2b);
    s = open_ok(tu_tmp("hf-tie"), tok);
    assert_true(fmt_src_hparams(s)->flags & FMT_FLAG_TIED);
    assert_null(fmt_src_tensor(s, FMT_R_OUTPUT, 0));
    fmt_src_close(s);

    /* Qwen2 with biases */
    hfopt o3 = { .qwen = 1, .bf16 = 1 };
    make_hf(tu_tmp("hf-qwen"), l2c, &o3);
    s = open_ok(tu_tmp("hf-qwen"), tok);
    const fmt_hparams *h = fmt_src_hparams(s);
    assert_string_equal(h->arch, "qwen2");
    assert_true(h->flags & FMT_FLAG_QKV_BIAS);
    check_hf(s, l2c, 1);
    const fmt_tensor *vb = fmt_src_tensor(s, FMT_R_V_BIAS, 3);
    assert_non_null(vb);
    assert_int_equal(vb->ne[0], 32);
    float v0;
    memcpy(&v0, vb->data, 4);
    assert_true(v0 == 320.0f);
    fmt_src_close(s);

    /* an embedding larger than the tokenizer: padded like llama.cpp */
    hfopt o4 = { .vocab_pad = 8 };
    make_hf(tu_tmp("hf-pad"), l2c, &o4);
    s = open_ok(tu_tmp("hf-pad"), tok);
    assert_int_equal(fmt_src_hparams(s)->vocab_size, 520);
    const fmt_kv *kv = fmt_src_kv(s);
    assert_int_equal(fmt_kv_arr_len(kv, "tokenizer.ggml.tokens"), 520);
    const char *pad = fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", 515, &len);
    assert_int_equal(len, 8);
    assert_memory_equal(pad, "[PAD515]", 8);
    if (fmt_kv_arr_len(kv, "tokenizer.ggml.scores"))
        assert_int_equal(fmt_kv_arr_len(kv, "tokenizer.ggml.scores"), 520);
    fmt_src_close(s);

    /* Llama-3 RoPE scaling from config.json */
    hfopt o5 = { .cfg_extra = "\"rope_scaling\": {\"rope_type\": \"llama3\", "
                              "\"factor\": 32.0, \"low_freq_factor\": 1.0, "
                              "\"high_freq_factor\": 4.0, "
                              "\"original_max_position_embeddings\": 8192}" };
    make_hf(tu_tmp("hf-l3"), l2c, &o5);
    s = open_ok(tu_tmp("hf-l3"), tok);
    h = fmt_src_hparams(s);
    assert_true(h->flags & FMT_FLAG_ROPE_LLAMA3);
    assert_true(h->rope_factor == 32.0f);
    assert_true(h->rope_high_freq == 4.0f);
    assert_int_equal(h->rope_orig_ctx, 8192);
    fmt_src_close(s);

    /* failures */
    struct { const char *dir; hfopt o; int rc; const char *msg; } bad[] = {
        { "hf-drop", { .drop = "model.layers.1.mlp.up_proj.weight" },
          FMT_EFORMAT, "model.layers.1.mlp.up_proj.weight" },
        { "hf-i64", { .i64 = "model.layers.2.self_attn.k_proj.weight" },
          FMT_EUNSUP, "model.layers.2.self_attn.k_proj.weight" },
        { "hf-arch", { .arch = "GPT2LMHeadModel" }, FMT_EUNSUP, "GPT2" },
        { "hf-nokey", { .no_config_key = 1 }, FMT_EFORMAT, "hidden_size" },
        { "hf-linear", { .cfg_extra = "\"rope_scaling\": {\"type\": "
                                      "\"linear\", \"factor\": 2.0}" },
          FMT_EUNSUP, "linear" },
        { "hf-act", { .cfg_extra = "\"hidden_act\": \"gelu\"" }, FMT_EUNSUP,
          "gelu" },
        { "hf-heads", { .cfg_extra = "\"num_key_value_heads\": 3" },
          FMT_EFORMAT, "KV head" },
        { "hf-type", { .cfg_extra = "\"num_hidden_layers\": \"5\"" },
          FMT_EFORMAT, "num_hidden_layers" },
        { "hf-shape", { .cfg_extra = "\"intermediate_size\": 171" },
          FMT_EFORMAT, "mlp.gate_proj" },
        { "hf-vocab", { .cfg_extra = "\"vocab_size\": 600" }, FMT_EFORMAT,
          "embed_tokens" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        make_hf(tu_tmp(bad[i].dir), l2c, &bad[i].o);
        /* the message names the folder or the file inside it */
        open_fails(tu_tmp(bad[i].dir), tok, bad[i].rc, bad[i].msg);
        open_fails(tu_tmp(bad[i].dir), tok, bad[i].rc, bad[i].dir);
    }
    fmt_src_close(l2c);
}

/* A safetensors file from a header text and DATA_N data bytes (zeros). */
static void spit_st(const char *path, const char *hdr, size_t data_n)
{
    size_t hl = strlen(hdr), n = 8 + hl + data_n;
    uint8_t *b = calloc(1, n);
    assert_non_null(b);
    uint64_t h64 = hl;
    memcpy(b, &h64, 8);
    memcpy(b + 8, hdr, hl);
    tu_spit(path, b, n);
    free(b);
}

/* stories260K.bin opened with its tokenizer (*tok); with dir, also made
 * into a plain HF folder there, whose model.safetensors path goes to st. */
static fmt_src *l2c_and_hf(const char **tok, const char *dir, char st[1024])
{
    *tok = tu_shared_file("models/tok512.bin");
    fmt_src *l2c = open_ok(tu_shared_file("models/stories260K.bin"), *tok);
    if (dir) {
        hfopt o = { 0 };
        make_hf(dir, l2c, &o);
        snprintf(st, 1024, "%s/model.safetensors", dir);
    }
    return l2c;
}

/* Damaged safetensors headers: lengths, truncations, JSON, offsets and
 * sizes that disagree, tensors that do not tile the data. */
static void test_hf_damage_header(void **state)
{
    (void)state;
    const char *tok;
    char st[1024];
    fmt_src *l2c = l2c_and_hf(&tok, tu_tmp("hf-base"), st);
    size_t n;
    uint8_t *orig = tu_slurp(st, &n);
    uint64_t hl;
    memcpy(&hl, orig, 8);
    uint8_t *b = malloc(n);

    /* header length: past the end, zero, huge */
    uint64_t lens[] = { n, n - 7, 0, UINT64_MAX, hl / 2 };
    for (size_t i = 0; i < 5; i++) {
        memcpy(b, orig, n);
        memcpy(b, &lens[i], 8);
        tu_spit(st, b, n);
        open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "model.safetensors");
    }
    /* truncations: inside the header, inside the data */
    size_t cuts[] = { 0, 4, 8, 8 + (size_t)hl / 2, 8 + (size_t)hl,
                      n - 1 };
    for (size_t i = 0; i < 6; i++) {
        tu_spit(st, orig, cuts[i]);
        open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "model.safetensors");
    }
    /* JSON damage: a byte at every 97th position of the header */
    int fails = 0, tries = 0;
    for (size_t pos = 8; pos < 8 + hl; pos += 97) {
        memcpy(b, orig, n);
        b[pos] = (b[pos] == '"') ? 'x' : '"';
        tu_spit(st, b, n);
        fmt_src *s = NULL;
        char err[512];
        int rc = fmt_src_open(&s, tu_tmp("hf-base"), tok, err, sizeof err);
        tries++;
        if (rc == FMT_OK)
            fmt_src_close(s);
        else {
            fails++;
            assert_null(strchr(err, '\n'));
        }
    }
    assert_true(fails > tries / 2);
    /* offsets and sizes that disagree (edit the digits in place) */
    const char *keys[] = { "\"data_offsets\":[0,", "\"shape\":[512," };
    for (int k = 0; k < 2; k++) {
        memcpy(b, orig, n);
        char *hp = (char *)b + 8;
        char *at = memmem(hp, hl, keys[k], strlen(keys[k]));
        assert_non_null(at);
        at += strlen(keys[k]);
        /* bump the first digit: a wrong end offset / a wrong row count */
        *at = *at == '9' ? '1' : (char)(*at + 1);
        tu_spit(st, b, n);
        open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "model.safetensors");
    }
    tu_spit(st, orig, n);
    fmt_src_close(open_ok(tu_tmp("hf-base"), tok));

    /* The tensors must tile the data (the specification; its reference
     * loader refuses the rest): bytes after the last tensor, ... */
    memcpy(b, orig, n);
    uint8_t *b2 = malloc(n + 4);
    memcpy(b2, orig, n);
    memset(b2 + n, 0, 4);
    tu_spit(st, b2, n + 4);
    free(b2);
    open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "cover");
    /* ... two tensors on the same bytes, a hole between two, one that
     * starts after 0 ... */
    const char *bad[] = {
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
        "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    };
    for (int i = 0; i < 4; i++) {
        spit_st(st, bad[i], 12);
        open_fails(tu_tmp("hf-base"), tok, FMT_EFORMAT, "data_offsets start at");
    }
    /* ... while an exact tiling in any key order, with an empty tensor on
     * a boundary, passes the check (and fails later, for the missing
     * weights the config asks for) */
    spit_st(st, "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12);
    {
        fmt_src *s = NULL;
        char err[512] = "";
        int rc = fmt_src_open(&s, tu_tmp("hf-base"), tok, err, sizeof err);
        if (rc == FMT_OK)
            fmt_src_close(s);
        else if (strstr(err, "data_offsets") || strstr(err, "cover"))
            fail_msg("an exact tiling was refused: %s", err);
    }
    tu_spit(st, orig, n);
    free(b);
    free(orig);
    fmt_src_close(l2c);
}

/* A damaged config.json, no weights, and an index pointing outside the
 * folder, at a missing tensor or a missing file, or not a map. */
static void test_hf_damage_config(void **state)
{
    (void)state;
    const char *tok;
    char st[1024], cfg[1024];
    fmt_src *l2c = l2c_and_hf(&tok, tu_tmp("hf-cfg"), st);
    snprintf(cfg, sizeof cfg, "%s/config.json", tu_tmp("hf-cfg"));
    size_t cn;
    uint8_t *corig = tu_slurp(cfg, &cn);

    tu_spit(cfg, corig, cn / 2);
    open_fails(tu_tmp("hf-cfg"), tok, FMT_EFORMAT, "config.json");
    tu_spit(cfg, "[1, 2]", 6);
    open_fails(tu_tmp("hf-cfg"), tok, FMT_EFORMAT, "config.json");
    tu_spit(cfg, corig, cn);
    /* no weights */
    unlink(st);
    open_fails(tu_tmp("hf-cfg"), tok, FMT_EFORMAT, "model.safetensors");

    /* index pointing outside the folder, or at a missing tensor */
    hfopt os = { .shards = 2 };
    make_hf(tu_tmp("hf-idx"), l2c, &os);
    char ix[1024];
    snprintf(ix, sizeof ix, "%s/model.safetensors.index.json", tu_tmp("hf-idx"));
    size_t in;
    uint8_t *iorig = tu_slurp(ix, &in);
    char *t = malloc(in + 256);
    memcpy(t, iorig, in);
    t[in] = 0;
    char *p = strstr(t, "model-00002-of-00002");
    assert_non_null(p);
    memcpy(p, "../", 3);
    tu_spit(ix, t, in);
    open_fails(tu_tmp("hf-idx"), tok, FMT_EFORMAT, "shard");
    snprintf(t, in + 256, "{\"weight_map\":{\"model.norm.weight\":"
             "\"model-00001-of-00002.safetensors\"}}");
    tu_spit(ix, t, strlen(t));
    open_fails(tu_tmp("hf-idx"), tok, FMT_EFORMAT, "model.norm.weight");
    snprintf(t, in + 256, "{\"weight_map\":{\"x\":"
             "\"missing.safetensors\"}}");
    tu_spit(ix, t, strlen(t));
    open_fails(tu_tmp("hf-idx"), tok, FMT_EIO, "missing.safetensors");
    snprintf(t, in + 256, "{\"weight_map\": 3}");
    tu_spit(ix, t, strlen(t));
    open_fails(tu_tmp("hf-idx"), tok, FMT_EFORMAT, "weight_map");
    tu_spit(ix, iorig, in);
    fmt_src_close(open_ok(tu_tmp("hf-idx"), tok));
    free(t);
    free(iorig);
    free(corig);
    fmt_src_close(l2c);
}

/* A pipeline config whose delays its combine style cannot take, or that
 * reach past the last layer: refused at open, as the .cflow reader would
 * refuse the converted file (fuzz regression
 * hf/convert-delays-on-parallel-sqrt2.a). */
static void test_hf_damage_pipeline(void **state)
{
    (void)state;
    const char *tok;
    fmt_src *l2c = l2c_and_hf(&tok, NULL, NULL);
#define PIPE "\"cflow_arch\": \"arch2_4_combined\", \"num_experts\": 0, "
    static const struct { const char *extra, *why; } pipe[] = {
        { PIPE "\"dense_delay\": 1, \"combine_style\": 0", "takes no delays" },
        { PIPE "\"expert_delay\": 1, \"combine_style\": 3", "takes no delays" },
        { PIPE "\"dense_delay\": 1, \"combine_style\": 2", "AsyncExperts takes no dense delay" },
        { PIPE "\"dense_delay\": 9, \"combine_style\": 1", "dense_delay 9 exceeds" },
        { PIPE "\"expert_delay\": 200, \"combine_style\": 1", "expert_delay 200 exceeds" },
    };
    for (size_t i = 0; i < sizeof pipe / sizeof pipe[0]; i++) {
        hfopt op = { .arch = "CflowPipelineForCausalLM", .cfg_extra = pipe[i].extra };
        make_hf(tu_tmp("hf-pipe"), l2c, &op);
        open_fails(tu_tmp("hf-pipe"), tok, FMT_EFORMAT, pipe[i].why);
    }
    hfopt okp = { .arch = "CflowPipelineForCausalLM",
                  .cfg_extra = PIPE "\"dense_delay\": 1, \"combine_style\": 1" };
#undef PIPE
    make_hf(tu_tmp("hf-pipe"), l2c, &okp);
    fmt_src_close(open_ok(tu_tmp("hf-pipe"), tok));
    fmt_src_close(l2c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf),
        cmocka_unit_test(test_hf_damage_header),
        cmocka_unit_test(test_hf_damage_config),
        cmocka_unit_test(test_hf_damage_pipeline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
