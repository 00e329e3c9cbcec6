/*
 * test_tok_hf.c — part of test_tok (tok_test.h): Hugging Face tokenizer
 * files.  Qwen2's vocab.json + merges.txt against llama.cpp's vectors;
 * tokenizer.json files written here, a BPE one (Qwen2's pre-tokenizer,
 * added and special tokens) and an SPM one (scores, byte fallback), read
 * to the same metadata a GGUF carries and the same ids.
 */
#include "config.h"

#include "tok_test.h"

/* ---- Hugging Face files ------------------------------------------------ */
#define QWEN2_INP "tokenizer-tests/qwen2-hf/ggml-vocab-qwen2.gguf.inp"
#define QWEN2_OUT "tokenizer-tests/qwen2-hf/ggml-vocab-qwen2.gguf.out"

void test_vocab_qwen2_hf(void **st)
{
    fmt_kv *kv;
    eng_tok *t;
    (void)st;
    t = tt_load_vocab_tok(tu_shared("tokenizer-tests/qwen2-hf"), &kv);
    tt_assert_kv_str(kv, "tokenizer.ggml.model", "gpt2");
    tt_assert_kv_str(kv, "tokenizer.ggml.pre", "qwen2");
    tt_run_vectors("qwen2 (vocab.json + merges.txt)", t, tu_shared(QWEN2_INP),
                tu_shared(QWEN2_OUT));
    eng_tok_free(t);
    fmt_kv_free(kv);
}


static void write_json(const char *dir, const char *name, json_object *o)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(json_object_to_file_ext(p, o, JSON_C_TO_STRING_PLAIN |
                                             JSON_C_TO_STRING_NOSLASHESCAPE),
                     0);
}

static json_object *jtok(int id, const char *content, int special)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_int(id));
    json_object_object_add(o, "content", json_object_new_string(content));
    json_object_object_add(o, "special", json_object_new_boolean(special));
    return o;
}

/* A tokenizer.json node {"type": type}. */
static json_object *jnode(const char *type)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "type", json_object_new_string(type));
    return o;
}

/* The "model" object: BPE over vocab and merges (both references taken
 * over). */
static json_object *bpe_model(json_object *vocab, json_object *merges,
                              int byte_fallback)
{
    json_object *m = jnode("BPE");
    json_object_object_add(m, "vocab", vocab);
    json_object_object_add(m, "merges", merges);
    json_object_object_add(m, "byte_fallback",
                           json_object_new_boolean(byte_fallback));
    return m;
}

/* dir/tokenizer.json from its parts (references taken over): "version"
 * and "decoder" only where given, "normalizer" and "pre_tokenizer" always
 * (JSON null where NULL). */
static void write_tokenizer(const char *dir, const char *version, json_object *added,
                            json_object *norm, json_object *pre, json_object *dec,
                            json_object *model)
{
    json_object *root = json_object_new_object();
    if (version)
        json_object_object_add(root, "version", json_object_new_string(version));
    json_object_object_add(root, "added_tokens", added);
    json_object_object_add(root, "normalizer", norm);
    json_object_object_add(root, "pre_tokenizer", pre);
    if (dec)
        json_object_object_add(root, "decoder", dec);
    json_object_object_add(root, "model", model);
    write_json(dir, "tokenizer.json", root);
    json_object_put(root);
}

#define HF_QWEN2_RE "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* A Qwen2 tokenizer.json from the shared vocab.json and merges.txt, with
 * the given Split expression. */
static void make_qwen2_json(const char *dir, const char *regex)
{
    json_object *model, *merges, *pre, *seq, *split, *pat, *bl, *added, *dec;
    char *mt = tu_slurp(tu_shared("tokenizer-tests/qwen2-hf/merges.txt"), NULL);
    json_object *vocab =
        json_object_from_file(tu_shared("tokenizer-tests/qwen2-hf/vocab.json"));
    assert_non_null(vocab);
    merges = json_object_new_array();
    for (char *l = mt; *l;) {
        char *e = strchr(l, '\n');
        if (e)
            *e = 0;
        if (*l && strncmp(l, "#version", 8))
            json_object_array_add(merges, json_object_new_string(l));
        if (!e)
            break;
        l = e + 1;
    }
    free(mt);
    model = bpe_model(vocab, merges, 0);
    pat = json_object_new_object();
    json_object_object_add(pat, "Regex", json_object_new_string(regex));
    split = jnode("Split");
    json_object_object_add(split, "pattern", pat);
    json_object_object_add(split, "behavior", json_object_new_string("Isolated"));
    json_object_object_add(split, "invert", json_object_new_boolean(0));
    bl = jnode("ByteLevel");
    json_object_object_add(bl, "add_prefix_space", json_object_new_boolean(0));
    json_object_object_add(bl, "use_regex", json_object_new_boolean(0));
    seq = json_object_new_array();
    json_object_array_add(seq, split);
    json_object_array_add(seq, bl);
    pre = jnode("Sequence");
    json_object_object_add(pre, "pretokenizers", seq);
    added = json_object_new_array();
    json_object_array_add(added, jtok(151643, "<|endoftext|>", 1));
    json_object_array_add(added, jtok(151644, "<|im_start|>", 1));
    json_object_array_add(added, jtok(151645, "<|im_end|>", 1));
    dec = jnode("ByteLevel");
    write_tokenizer(dir, "1.0", added, NULL, pre, dec, model);
}

static const char *const qwen_files[] = {"tokenizer.json",
                                         "tokenizer_config.json", NULL};
#define CHATML "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"

void test_vocab_qwen2_tokenizer_json(void **st)
{
    const char *dir = tt_tmpdir();
    json_object *cfg = json_object_new_object();
    fmt_kv *kv;
    eng_tok *t;
    uint32_t id;
    size_t n;
    int32_t *ids;
    (void)st;
    make_qwen2_json(dir, HF_QWEN2_RE);
    json_object_object_add(cfg, "chat_template", json_object_new_string(CHATML));
    json_object_object_add(cfg, "eos_token", json_object_new_string("<|im_end|>"));
    json_object_object_add(cfg, "bos_token", NULL);
    json_object_object_add(cfg, "add_bos_token", json_object_new_boolean(0));
    write_json(dir, "tokenizer_config.json", cfg);
    json_object_put(cfg);

    t = tt_load_vocab_tok(dir, &kv);
    tt_assert_kv_str(kv, "tokenizer.ggml.model", "gpt2");
    tt_assert_kv_str(kv, "tokenizer.ggml.pre", "qwen2");
    tt_assert_kv_str(kv, "tokenizer.chat_template", CHATML);
    assert_int_equal(fmt_kv_get_u32(kv, "tokenizer.ggml.eos_token_id", &id), 0);
    assert_int_equal(id, 151645);
    assert_int_equal(eng_tok_n_vocab(t), 151646);
    assert_int_equal(eng_tok_eos(t), 151645);
    assert_int_equal(eng_tok_eot(t), 151645);
    assert_false(eng_tok_add_bos(t));
    assert_true(eng_tok_is_control(t, 151644));
    assert_false(eng_tok_is_control(t, 9707));
    tt_run_vectors("qwen2 (tokenizer.json)", t, tu_shared(QWEN2_INP),
                tu_shared(QWEN2_OUT));

    /* special tokens are text unless parse_special */
    {
        const char *s = "<|im_start|>user\nHi there<|im_end|>\n";
        size_t has = 0;
        ids = tt_encode(t, s, strlen(s), 1, 1, &n);
        assert_true(n >= 4);
        assert_int_equal(ids[0], 151644);
        for (size_t i = 0; i < n; i++)
            has += ids[i] == 151645;
        assert_int_equal(has, 1);
        free(ids);
        ids = tt_encode(t, s, strlen(s), 1, 0, &n);
        for (size_t i = 0; i < n; i++)
            assert_true(ids[i] < 151643);
        free(ids);
    }
    eng_tok_free(t);
    fmt_kv_free(kv);
    tt_rm_dir(dir, qwen_files);

    /* an expression list we do not name is kept and compiled as given */
    dir = tt_tmpdir();
    make_qwen2_json(dir, "(?:" HF_QWEN2_RE ")");
    t = tt_load_vocab_tok(dir, &kv);
    tt_assert_kv_str(kv, "tokenizer.ggml.pre", "cflow-regex");
    assert_int_equal(fmt_kv_arr_len(kv, "tokenizer.cflow.pre_regex"), 1);
    tt_run_vectors("qwen2 (tokenizer.json, verbatim regex)", t,
                tu_shared(QWEN2_INP), tu_shared(QWEN2_OUT));
    eng_tok_free(t);
    fmt_kv_free(kv);
    tt_rm_dir(dir, qwen_files);
}

/* A SentencePiece-style BPE tokenizer.json (as HF converts Llama's
 * tokenizer.model) built from the llama-spm GGUF: merges are every split
 * of a token into two tokens, best piece score first. */
typedef struct scored { float score; int32_t id; } scored;
static int scored_cmp(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->id - y->id;
}

void test_vocab_spm_tokenizer_json(void **st)
{
    static const char *const files[] = {"tokenizer.json", NULL};
    fmt_gguf *g;
    char err[256];
    const fmt_kv *gk;
    const char *dir = tt_tmpdir();
    json_object *model, *vocab, *merges, *added, *norm, *nseq, *o, *pat;
    uint64_t n;
    scored *order;
    fmt_kv *kv;
    eng_tok *t;
    (void)st;
    if (fmt_gguf_open(&g, tu_shared("tokenizer-tests/ggml-vocab-llama-spm.gguf"),
                      err, sizeof err))
        fail_msg("%s", err);
    gk = fmt_gguf_kv(g);
    n = fmt_kv_arr_len(gk, "tokenizer.ggml.tokens");
    vocab = json_object_new_object();
    order = malloc(n * sizeof *order);
    for (uint64_t i = 0; i < n; i++) {
        size_t l;
        const char *s = fmt_kv_arr_str(gk, "tokenizer.ggml.tokens", i, &l);
        char *z = strndup(s, l);
        json_object_object_add(vocab, z, json_object_new_int((int)i));
        free(z);
        order[i].id = (int32_t)i;
        assert_int_equal(fmt_kv_arr_f32(gk, "tokenizer.ggml.scores", i,
                                        &order[i].score), 0);
    }
    qsort(order, n, sizeof *order, scored_cmp);
    merges = json_object_new_array();
    for (uint64_t k = 0; k < n; k++) {
        int32_t id = order[k].id, ty;
        size_t l;
        const char *s = fmt_kv_arr_str(gk, "tokenizer.ggml.tokens", id, &l);
        assert_int_equal(fmt_kv_arr_i32(gk, "tokenizer.ggml.token_type", id,
                                        &ty), 0);
        if (ty != 1)
            continue;
        for (size_t cut = 1; cut < l; cut++) {
            char a[256], b[256], m[520];
            json_object *x;
            if (((unsigned char)s[cut] & 0xC0) == 0x80 || l >= 256)
                continue;
            memcpy(a, s, cut);
            a[cut] = 0;
            memcpy(b, s + cut, l - cut);
            b[l - cut] = 0;
            if (!json_object_object_get_ex(vocab, a, &x) ||
                !json_object_object_get_ex(vocab, b, &x))
                continue;
            snprintf(m, sizeof m, "%s %s", a, b);
            json_object_array_add(merges, json_object_new_string(m));
        }
    }
    free(order);
    model = bpe_model(vocab, merges, 1);
    json_object_object_add(model, "unk_token", json_object_new_string("<unk>"));
    added = json_object_new_array();
    json_object_array_add(added, jtok(0, "<unk>", 1));
    json_object_array_add(added, jtok(1, "<s>", 1));
    json_object_array_add(added, jtok(2, "</s>", 1));
    nseq = json_object_new_array();
    o = jnode("Prepend");
    json_object_object_add(o, "prepend", json_object_new_string("\xe2\x96\x81"));
    json_object_array_add(nseq, o);
    o = jnode("Replace");
    pat = json_object_new_object();
    json_object_object_add(pat, "String", json_object_new_string(" "));
    json_object_object_add(o, "pattern", pat);
    json_object_object_add(o, "content", json_object_new_string("\xe2\x96\x81"));
    json_object_array_add(nseq, o);
    norm = jnode("Sequence");
    json_object_object_add(norm, "normalizers", nseq);
    write_tokenizer(dir, NULL, added, norm, NULL, NULL, model);

    {
        char p[512];
        snprintf(p, sizeof p, "%s/tokenizer.json", dir);
        t = tt_load_vocab_tok(p, &kv);  /* the file itself, not the folder */
    }
    tt_assert_kv_str(kv, "tokenizer.ggml.model", "llama");
    assert_true(eng_tok_is_spm(t));
    assert_int_equal(eng_tok_bos(t), 1);
    assert_int_equal(eng_tok_eos(t), 2);
    tt_run_vectors("llama-spm (tokenizer.json)", t,
                tu_shared("tokenizer-tests/ggml-vocab-llama-spm.gguf.inp"),
                tu_shared("tokenizer-tests/ggml-vocab-llama-spm.gguf.out"));
    eng_tok_free(t);
    fmt_kv_free(kv);
    fmt_gguf_close(g);
    tt_rm_dir(dir, files);
}
