/*
 * fuzz_gguf.c — GGUF files: the container (fmt_gguf_open), the model view
 * over it (fmt_src_open: architecture keys, tensor roles and shapes, RoPE
 * scaling, vocabulary fit), the tokenizer the metadata describes
 * (eng_tok_load) and the converter (fmt_cflow_write, whose output the
 * .cflow reader must accept).
 *
 * Input: the bytes of a .gguf file.
 * Checks: every tensor's name, size and bytes (read in full, so an offset
 * past the end of the file is an ASan report), lookup by name finds it, a
 * readable type dequantises; failures follow the one-line error contract.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";
    const char *path = fuzz_path("model.gguf");
    fuzz_write("model.gguf", data, size);

    fmt_gguf *g = NULL;
    int rc = fmt_gguf_open(&g, path, err, sizeof err);
    fuzz_check_err("fmt_gguf_open", rc, FMT_EARG, err, sizeof err);
    if (rc < 0)
        return 0;
    FUZZ_ASSERT(g && fmt_gguf_kv(g));
    uint64_t nt = fmt_gguf_n_tensors(g);
    for (uint64_t i = 0; i < nt; i++) {
        const fmt_tensor *t = fmt_gguf_tensor(g, i);
        FUZZ_ASSERT(t && t->name);
        FUZZ_ASSERT(t->ndim >= 1 && t->ndim <= 4);
        uint64_t ne = 1;
        for (unsigned d = 0; d < 4; d++) {
            FUZZ_ASSERT(t->ne[d] >= 1);
            ne *= t->ne[d];
        }
        FUZZ_ASSERT(t->nbytes == fmt_dtype_size(t->dtype, ne));
        const volatile unsigned char *b = t->data;
        unsigned char acc = 0;
        for (uint64_t k = 0; k < t->nbytes; k++)
            acc ^= b[k];
        (void)acc;
        const fmt_tensor *f = fmt_gguf_find(g, t->name);
        FUZZ_ASSERT(f && strcmp(f->name, t->name) == 0);
        (void)fmt_dtype_name(t->dtype);
        /* every type the reader knows has a size; those cflow keeps (a
         * tile type of its own) dequantise, the others do not */
        if (t->ne[0] <= (1u << 16)) {
            float *row = malloc(t->ne[0] * sizeof *row);
            FUZZ_ASSERT(row);
            int dq = fmt_dequant(t->dtype, t->data, row, t->ne[0]);
            if ((dq == 0) != (fmt_dtype_tile(t->dtype) >= 0))
                fuzz_fail("tensor %s: type %s %s", t->name, fmt_dtype_name(t->dtype),
                          dq ? "has a tile type but does not dequantise"
                             : "dequantises but has no tile type");
            free(row);
        }
    }
    FUZZ_ASSERT(fmt_gguf_tensor(g, nt) == NULL);
    FUZZ_ASSERT(fmt_gguf_find(g, "") == NULL);

    /* the tokenizer straight from the container's metadata */
    eng_tok *t = NULL;
    err[0] = '\0';
    rc = eng_tok_load(&t, fmt_gguf_kv(g), err, sizeof err);
    fuzz_check_err("eng_tok_load", rc, ENG_ELAST, err, sizeof err);
    if (rc == 0) {
        fuzz_tok_walk(t);
        static const char text[] = " Hello world!\n\tonce upon 12345 "
                                   "\xe6\x97\xa5\xe6\x9c\xac <s></s>";
        fuzz_tok_roundtrip(t, text, sizeof text - 1, 1, 1, NULL);
        eng_tok_free(t);
    }
    fmt_gguf_close(g);

    /* the model view, and conversion */
    fmt_src *s = NULL;
    err[0] = '\0';
    rc = fmt_src_open(&s, path, NULL, err, sizeof err);
    fuzz_check_err("fmt_src_open", rc, FMT_EARG, err, sizeof err);
    if (rc == 0) {
        FUZZ_ASSERT(strcmp(fmt_src_kind(s), "gguf") == 0);
        fuzz_walk_src(s);
        fuzz_convert_check(s);
        fmt_src_close(s);
    }
    return 0;
}
