/*
 * fuzz_cflow.c — the .cflow reader (fmt_model_open), which must refuse any
 * damaged file before the engine walks it without further checks; then the
 * engine itself on what the reader accepts.
 *
 * Input: the bytes of a .cflow file.
 * Checks: a lazy open (FMT_OPEN_LAZY_EXPERTS) followed by a check of
 * every expert accepts exactly what the plain open accepts; once open,
 * every stream's tiles lie inside their matrices, cover
 * each matrix exactly once and dequantise without reading past the file
 * (fuzz_walk_model); the metadata's tokenizer loads or fails cleanly; a
 * session opens on it (context capped at 8 positions, one thread) and
 * decodes two tokens without crashing.
 */
#include "config.h"

#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";
    const char *path = fuzz_path("model.cflow");
    fuzz_write("model.cflow", data, size);

    fmt_model *m = NULL;
    int rc = fmt_model_open(&m, path, err, sizeof err);
    fuzz_check_err("fmt_model_open", rc, FMT_EARG, err, sizeof err);
    {
        /* opened lazily (the banks laid out unread, each expert checked
         * when read), then every expert checked: accepted exactly when
         * the plain open accepts it */
        char err3[512] = "";
        fmt_model *m3 = NULL;
        int rl = fmt_model_open_ex(&m3, path, FMT_OPEN_LAZY_EXPERTS, err3, sizeof err3);
        fuzz_check_err("fmt_model_open_ex lazy", rl, FMT_EARG, err3, sizeof err3);
        {   /* --no-mmap's lazy open: the same verdict and message */
            char err4[512] = "";
            fmt_model *m4 = NULL;
            int r4 = fmt_model_open_ex(&m4, path, FMT_OPEN_LAZY_EXPERTS | FMT_OPEN_READ |
                                       FMT_OPEN_MAP_EXPERTS, err4, sizeof err4);
            FUZZ_ASSERT(r4 == rl && (rl == 0 || !strcmp(err3, err4)));
            fmt_model_close(m4);
        }
        if (rl == 0) {
            rl = fmt_model_check_experts(m3, err3, sizeof err3);
            fuzz_check_err("fmt_model_check_experts", rl, FMT_EARG, err3, sizeof err3);
            FUZZ_ASSERT(rl < 0 || !fmt_model_experts_unchecked(m3));
        }
        FUZZ_ASSERT((rl == 0) == (rc == 0));
        fmt_model_close(m3);
    }
    if (rc < 0) {
        FUZZ_ASSERT(m == NULL);
        char err2[512] = "";
        fmt_model *m2 = NULL;
        FUZZ_ASSERT(fmt_model_open_ex(&m2, path, FMT_OPEN_READ, err2, sizeof err2) == rc);
        FUZZ_ASSERT(m2 == NULL && !strcmp(err, err2));
        FUZZ_ASSERT(fmt_model_open_ex(&m2, path, FMT_OPEN_READ | FMT_OPEN_MAP_EXPERTS,
                                      err2, sizeof err2) == rc);
        FUZZ_ASSERT(m2 == NULL && !strcmp(err, err2));
        return 0;
    }
    FUZZ_ASSERT(fmt_model_file_size(m) == size);
    fuzz_walk_model(m);
    fmt_model_close(m);

    /* --no-mmap reads the same bytes into anonymous memory, whole or with
     * the expert banks left mapped: the same verdict, the same message
     * (checked above for a refusal too), the same bytes. */
    static const unsigned how[2] = { FMT_OPEN_READ, FMT_OPEN_READ | FMT_OPEN_MAP_EXPERTS };
    for (int i = 0; i < 2; i++) {
        char err2[512] = "";
        fmt_model *m2 = NULL;
        uint64_t n2 = 0;
        FUZZ_ASSERT(fmt_model_open_ex(&m2, path, how[i], err2, sizeof err2) == 0);
        FUZZ_ASSERT(fmt_model_file_size(m2) == size);
        const void *b2 = fmt_model_map(m2, &n2);
        FUZZ_ASSERT(n2 == size && !memcmp(b2, data, size));
        FUZZ_ASSERT(fmt_model_copied_bytes(m2) <= size);
        fmt_model_close(m2);
    }

    eng_opts o;
    eng_opts_default(&o);
    o.n_threads = 1;
    o.n_ctx = 8;
    eng_session *s = NULL;
    err[0] = '\0';
    rc = eng_open(&s, path, &o, err, sizeof err);
    fuzz_check_err("eng_open", rc, ENG_ELAST, err, sizeof err);
    if (rc < 0)
        return 0;
    FUZZ_ASSERT(eng_n_ctx(s) >= 1 && eng_n_ctx(s) <= 8);
    const eng_tok *t = eng_tokenizer(s);
    uint32_t nv = eng_hparams(s)->vocab_size;
    int32_t tok = t && eng_tok_bos(t) >= 0 ? eng_tok_bos(t) : 0;
    for (int i = 0; i < 2 && (uint32_t)tok < nv; i++) {
        err[0] = '\0';
        rc = eng_decode(s, tok, err, sizeof err);
        fuzz_check_err("eng_decode", rc, ENG_ELAST, err, sizeof err);
        if (rc < 0)
            break;
        const float *lg = eng_logits(s);
        FUZZ_ASSERT(lg);
        /* the next input: the arg max (any valid id will do) */
        int32_t best = 0;
        for (uint32_t k = 1; k < nv; k++)
            if (lg[k] > lg[best])
                best = (int32_t)k;
        tok = best;
    }
    eng_close(s);
    return 0;
}
