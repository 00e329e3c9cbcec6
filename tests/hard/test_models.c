/*
 * test_models.c — hostile model files: what is not a file, values that do
 * not fit the format, and refusals that must name the right thing.
 *
 * The real binary reads each input (`cflow inspect`, `run`, `tokenize`,
 * `convert`) and must refuse it in one line naming the file (and the
 * field, with its value and the limit), exit status 1, within a time
 * limit, so that a regression fails instead of hanging the suite:
 *
 *   - special files as model paths: a FIFO nobody writes to (open(2)
 *     alone would block for ever), /dev/zero, a folder where a file is
 *     expected, and a Hugging Face folder whose config.json or
 *     model.safetensors, tokenizer.json, tokenizer_config.json or
 *     chat_template.jinja is a FIFO, are refused before any blocking open
 *     and never taken for a missing file;
 *   - narrowing: a value wider than its .cflow field (an HF sliding_window
 *     of 70000 in a 16-bit field) is refused with value and limit, and the
 *     widest value that fits is stored whole;
 *   - names: non-finite weights are the input's fault (its path and the
 *     tensor, not the output's), an error in tokenizer_config.json names
 *     it (not tokenizer.json), a GGUF tensor offset near 2^64 is printed
 *     as the offset and the data start, not their wrapped sum;
 *   - shapes: trailing unit dimensions are one rule, so a [16, 276, 1]
 *     embedding converts as a [16, 16, 1, 1] attention matrix does, in
 *     GGUF and in safetensors;
 *   - refusals that say which field of which format failed: a llama2.c
 *     checkpoint with one bad header field is recognised as one and the
 *     field named with its value and range (not "not a GGUF file, a
 *     llama2.c checkpoint or a Hugging Face model directory"); a .cflow
 *     model given to convert is called one.
 *
 * Inputs come from the fuzz seeds (tests/fuzz/corpus), each with one
 * thing changed.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hard.h"

#define NOT_REGULAR(kind) "not a regular file (it is " kind ")"

/* The Hugging Face seed unpacked into tu_tmp(name), its file `file`
 * (when not NULL) replaced by a FIFO. */
static const char *hf_folder(const char *name, const char *file)
{
    const char *dir = tu_tmp(name);
    assert_int_equal(hard_unpack(hard_seed("hf/llama-f32.a"), dir, NULL, NULL), 0);
    if (file) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, file);
        unlink(path);
        assert_int_equal(mkfifo(path, 0600), 0);
    }
    return dir;
}

/* Replace the first `from` in file (of dir) by `to`; safetensors: in the
 * JSON header, whose length prefix is updated. */
static void edit(const char *dir, const char *file, const char *from, const char *to)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    size_t n, hl = 0;
    char *a = tu_read_file(path, &n);
    assert_non_null(a);
    int st = strstr(file, ".safetensors") != NULL;
    if (st)
        memcpy(&hl, a, 8);
    char *at = memmem(a, st ? 8 + hl : n, from, strlen(from));
    if (!at)
        fail_msg("no \"%s\" in %s", from, path);
    size_t fl = strlen(from), tl = strlen(to), head = (size_t)(at - a);
    char *b = malloc(n - fl + tl);
    assert_non_null(b);
    memcpy(b, a, head);
    memcpy(b + head, to, tl);
    memcpy(b + head + tl, at + fl, n - head - fl);
    if (st) {
        uint64_t nl = hl - fl + tl;
        memcpy(b, &nl, 8);
    }
    assert_int_equal(tu_write_file(path, b, n - fl + tl), 0);
    free(a);
    free(b);
}

/* ---- GGUF: the seed's layout, one tensor changed ------------------------ */

typedef struct gguf_walk {
    unsigned char *p;
    size_t n, o;
} gguf_walk;

static uint64_t take(gguf_walk *w, size_t k)
{
    uint64_t v = 0;
    assert_true(w->o + k <= w->n);
    memcpy(&v, w->p + w->o, k);
    w->o += k;
    return v;
}

static void skip_value(gguf_walk *w, uint32_t type)
{
    static const unsigned char size[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    assert_true(type < 13);
    if (type == 8) {
        w->o += take(w, 8);
    } else if (type == 9) {
        uint32_t et = (uint32_t)take(w, 4);
        uint64_t cnt = take(w, 8);
        for (uint64_t i = 0; i < cnt; i++)
            skip_value(w, et);
    } else {
        w->o += size[type];
    }
}

/* The seed gguf/NAME rewritten into out with tensor `tensor` given one
 * more dimension of 1 (extra_dim) and, when poison, its first weight NaN,
 * or its offset set to offset when that is not 0.  The seed has the
 * default alignment of 32. */
static void gguf_variant(const char *seed, const char *out, const char *tensor,
                         int extra_dim, int poison, uint64_t offset)
{
    size_t n;
    gguf_walk w = { (unsigned char *)tu_read_file(hard_seed(seed), &n), 0, 0 };
    assert_non_null(w.p);
    w.n = n;
    assert_null(memmem(w.p, n, "general.alignment", 17));
    w.o = 8;
    uint64_t nt = take(&w, 8), nkv = take(&w, 8);
    for (uint64_t i = 0; i < nkv; i++) {
        w.o += take(&w, 8);
        skip_value(&w, (uint32_t)take(&w, 4));
    }
    unsigned char *b = malloc(n + 64);
    assert_non_null(b);
    size_t bo = w.o, at = 0;
    memcpy(b, w.p, w.o);
    uint64_t toff = 0;
    int found = 0;
    for (uint64_t i = 0; i < nt; i++) {
        size_t start = w.o;
        uint64_t nl = take(&w, 8);
        int hit = nl == strlen(tensor) && !memcmp(w.p + w.o, tensor, nl);
        w.o += nl;
        uint32_t nd = (uint32_t)take(&w, 4);
        memcpy(b + bo, w.p + start, w.o - start);
        bo += w.o - start;
        if (hit && extra_dim)
            nd++;
        memcpy(b + bo - 4, &nd, 4);
        memcpy(b + bo, w.p + w.o, 8 * (size_t)(nd - (hit && extra_dim)));
        bo += 8 * (size_t)(nd - (hit && extra_dim));
        w.o += 8 * (size_t)(nd - (hit && extra_dim));
        if (hit && extra_dim) {
            uint64_t one = 1;
            memcpy(b + bo, &one, 8);
            bo += 8;
        }
        memcpy(b + bo, w.p + w.o, 12);             /* type, offset */
        if (hit) {
            found = 1;
            memcpy(&toff, w.p + w.o + 4, 8);
            at = bo + 4;
        }
        bo += 12;
        w.o += 12;
    }
    assert_true(found);
    if (offset)
        memcpy(b + at, &offset, 8);
    size_t ds = (w.o + 31) / 32 * 32, nds = (bo + 31) / 32 * 32;
    memset(b + bo, 0, nds - bo);
    memcpy(b + nds, w.p + ds, n - ds);
    if (poison) {
        float nan = 0.0f / 0.0f;
        memcpy(b + nds + toff, &nan, 4);
    }
    assert_int_equal(tu_write_file(out, b, nds + n - ds), 0);
    free(b);
    free(w.p);
}

/* ---- class 3: special files as model paths ------------------------------ */

static void test_special_model_paths(void **state)
{
    (void)state;
    const char *fifo = tu_tmp("model.fifo"), *out = tu_tmp("out.cflow");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const char *fifo_kind = NOT_REGULAR("a FIFO");
    hard_refused(fifo, fifo_kind, 20, HARD_ARGS("inspect", fifo));
    hard_refused(fifo, fifo_kind, 20, HARD_ARGS("run", "-m", fifo, "-p", "hi", "--no-log"));
    hard_refused(fifo, fifo_kind, 20, HARD_ARGS("tokenize", "-m", fifo, "hi"));
    hard_refused(fifo, fifo_kind, 20, HARD_ARGS("convert", fifo, out));

    /* a device that never ends, a folder where a .cflow file is expected */
    const char *dev = NOT_REGULAR("a character device");
    hard_refused("/dev/zero", dev, 20, HARD_ARGS("inspect", "/dev/zero"));
    hard_refused("/dev/zero", dev, 20, HARD_ARGS("convert", "/dev/zero", out));
    hard_refused("/dev/zero", dev, 20, HARD_ARGS("tokenize", "-m", "/dev/zero", "hi"));
    const char *dir = tu_tmp("a-folder");
    mkdir(dir, 0700);
    hard_refused(dir, NOT_REGULAR("a directory"), 20, HARD_ARGS("inspect", dir));
    hard_refused(dir, NOT_REGULAR("a directory"), 20,
                 HARD_ARGS("run", "-m", dir, "-p", "hi", "--no-log"));

    /* a llama2.c checkpoint's tokenizer */
    const char *l2c = tu_tmp("l2c");
    assert_int_equal(hard_unpack(hard_seed("llama2c/shared.a"), l2c, NULL, NULL), 0);
    char model[4096];
    snprintf(model, sizeof model, "%s/model.bin", l2c);
    hard_refused(fifo, fifo_kind, 20, HARD_ARGS("convert", model, out, "--tokenizer", fifo));

    /* a Hugging Face folder with a FIFO in a file's place: refused, never
     * taken for a missing file */
    static const char *const files[] = { "config.json", "model.safetensors", "tokenizer.json",
                                         "tokenizer_config.json", "chat_template.jinja" };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        const char *hf = hf_folder(files[i], files[i]);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", hf, files[i]);
        hard_refused(path, fifo_kind, 20, HARD_ARGS("convert", hf, out));
        if (i >= 2)                             /* the tokenizer's files */
            hard_refused(path, fifo_kind, 20, HARD_ARGS("tokenize", "-m", hf, "hi"));
    }
}

/* ---- class 6: values wider than their .cflow field ---------------------- */

static void test_narrowing(void **state)
{
    (void)state;
    static const char *const ctx = "\"max_position_embeddings\": 64";
    /* a Mistral window under a context of 2^17: the header's field is 16
     * bits, so 70000 would be stored as 4464 */
    const char *dir = hf_folder("swa-70000", NULL), *out = tu_tmp("swa.cflow");
    edit(dir, "config.json", "LlamaForCausalLM", "MistralForCausalLM");
    edit(dir, "config.json", ctx, "\"max_position_embeddings\": 131072, "
         "\"sliding_window\": 70000");
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    hard_refused(cfg, "sliding window 70000 is over the 65535 a .cflow file holds", 60,
                 HARD_ARGS("convert", dir, out));
    struct stat st;
    assert_int_not_equal(stat(out, &st), 0);

    /* past the 32 bits every reader reads: the value and the limit, not
     * "not a non-negative integer" */
    dir = hf_folder("layers-2e32", NULL);
    edit(dir, "config.json", "\"num_hidden_layers\": 1", "\"num_hidden_layers\": 4294967296");
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    hard_refused(cfg, "num_hidden_layers 4294967296 is over the 4294967295 cflow reads", 60,
                 HARD_ARGS("convert", dir, out));

    /* the widest window that fits is stored whole */
    dir = hf_folder("swa-65535", NULL);
    edit(dir, "config.json", "LlamaForCausalLM", "MistralForCausalLM");
    edit(dir, "config.json", ctx, "\"max_position_embeddings\": 131072, "
         "\"sliding_window\": 65535");
    tu_proc p;
    hard_run(&p, 60, HARD_ARGS("convert", dir, out));
    assert_true(tu_ok(&p, "convert"));
    tu_proc_free(&p);
    size_t n;
    unsigned char *h = (unsigned char *)tu_read_file(out, &n);
    assert_non_null(h);
    assert_true(n > 88);
    assert_int_equal(h[46] | h[47] << 8, 65535);      /* FMT_H_SWA */
    free(h);
}

/* ---- class 7: errors name the input, values unwrapped ------------------- */

static void test_names(void **state)
{
    (void)state;
    /* a NaN weight: the input's fault, named with its tensor */
    const char *in = tu_tmp("nan-embd.gguf"), *out = tu_tmp("nan-out.cflow");
    gguf_variant("gguf/llama-f32.gguf", in, "token_embd.weight", 0, 1, 0);
    tu_proc p;
    hard_run(&p, 60, HARD_ARGS("convert", in, out));
    assert_int_equal(p.status, 1);
    if (strncmp(p.err, "cflow: ", 7) || strncmp(p.err + 7, in, strlen(in)) ||
        !strstr(p.err, "token_embd.weight") || strstr(p.err, out))
        fail_msg("expected %s and its tensor, not %s: %s", in, out, p.err);
    tu_proc_free(&p);

    /* a bad id in tokenizer_config.json: named, not tokenizer.json beside it */
    const char *dir = hf_folder("bad-added-id", NULL);
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    static const char bad_id[] = "{\"added_tokens_decoder\": {\"x1\": {\"content\": \"<a>\"}}}";
    assert_int_equal(tu_write_file(cfg, bad_id, sizeof bad_id - 1), 0);
    hard_refused(cfg, "added_tokens_decoder has a bad id", 60, HARD_ARGS("convert", dir, out));
    hard_refused(cfg, "added_tokens_decoder has a bad id", 60,
                 HARD_ARGS("tokenize", "-m", dir, "hi"));

    /* an offset of 2^64 - 32: the data start plus it wraps */
    in = tu_tmp("offset-2e64.gguf");
    gguf_variant("gguf/llama-f32.gguf", in, "token_embd.weight", 0, 0, ~(uint64_t)31);
    hard_refused(in, "offset 18446744073709551584 (+", 20, HARD_ARGS("convert", in, out));
}

/* ---- class 9: one rule for trailing unit dimensions ---------------------- */

static void test_unit_dims(void **state)
{
    (void)state;
    tu_proc p;
    const char *out = tu_tmp("units.cflow");
    static const char *const tensors[] = { "token_embd.weight", "blk.0.attn_q.weight" };
    for (int i = 0; i < 2; i++) {
        /* [16, 276, 1] embedding, then [16, 16, 1] attention */
        const char *in = tu_tmp(i ? "q-3d.gguf" : "embd-3d.gguf");
        gguf_variant("gguf/llama-f32.gguf", in, tensors[i], 1, 0, 0);
        hard_run(&p, 60, HARD_ARGS("convert", in, out));
        assert_true(tu_ok(&p, in));
        tu_proc_free(&p);
    }
    /* safetensors lists the outermost dimension first: [1, 276, 16] */
    const char *dir = hf_folder("st-embd-3d", NULL);
    edit(dir, "model.safetensors", "\"shape\":[276,16]", "\"shape\":[1,276,16]");
    edit(dir, "model.safetensors", "\"shape\":[16,16]", "\"shape\":[1,1,16,16]");
    hard_run(&p, 60, HARD_ARGS("convert", dir, out));
    assert_true(tu_ok(&p, dir));
    tu_proc_free(&p);
    /* a dimension of 2 is not a unit one: refused with both shapes */
    dir = hf_folder("st-embd-2", NULL);
    edit(dir, "model.safetensors", "\"shape\":[16,16]", "\"shape\":[2,8,16]");
    hard_refused(dir, "has shape [16, 8, 2], expected [16, 16]", 60,
                 HARD_ARGS("convert", dir, out));
}

/* ---- class 10: which field of which format ------------------------------ */

static void test_llama2c_fields(void **state)
{
    (void)state;
    static const struct { const char *name; int field; int32_t value; const char *want; } ps[] = {
        { "dim-0", 0, 0, "llama2.c header: dim 0 is out of range (1..65536)" },
        { "heads-0", 3, 0, "llama2.c header: n_heads 0 is out of range (1..65536)" },
        { "kv-heads-5", 4, 5, "llama2.c header: n_kv_heads 5 does not divide n_heads" },
        { "vocab-0", 5, 0, "llama2.c header: vocab_size 0 is out of range "
                           "(-4194304..4194304, not 0)" },
        { "seq-neg", 6, -16, "llama2.c header: seq_len -16 is out of range (1..16777216)" },
    };
    const char *out = tu_tmp("l2c.cflow");
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
        char model[4096], tok[4096];
        hard_l2c_patched(ps[i].name, ps[i].field, ps[i].value, model, tok);
        hard_refused(model, ps[i].want, 60,
                     HARD_ARGS("convert", model, out, "--tokenizer", tok));
    }
    /* a converted model is not a source */
    const char *cf = hard_seed("cflow/llama-q8_0.cflow");
    hard_refused(cf, "a .cflow model already", 60, HARD_ARGS("convert", cf, out));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_special_model_paths),
        cmocka_unit_test(test_narrowing),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_unit_dims),
        cmocka_unit_test(test_llama2c_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
