/*
 * fuzz_vocab.c — tokenizer files on their own (fmt_vocab_load): a llama2.c
 * tokenizer.bin, a Hugging Face tokenizer.json (BPE, byte-level or
 * SentencePiece-style, pre-tokenizer regexes kept for PCRE2), vocab.json +
 * merges.txt, tokenizer_config.json and chat_template.jinja; then the
 * engine's tokenizer built from the keys they give (eng_tok_load) on a few
 * texts.
 *
 * Input: an archive (fuzz.h) of a tokenizer directory, loaded as the
 * directory (and through vocab.json's path when there is one); any other
 * input is one file, which fmt_vocab_load classifies itself (JSON or
 * tokenizer.bin).
 * Checks: one-line errors; every token's piece; encode/decode consistency
 * and valid UTF-8 out of the streaming detokeniser (fuzz_tok_roundtrip).
 */
#include "config.h"

#include <string.h>

#include "fuzz.h"

static void load_and_use(const char *path)
{
    static const char *const texts[] = {
        "Hello world", " hello  the\n\nworld 12 in",
        "<|im_start|>user\nhi<|im_end|>",
        "\xe2\x96\x81x \xc3\xa9\xf0\x9f\x98\x80 \xff\xfe",
    };
    char err[512] = "";
    fmt_kv *kv = fmt_kv_new();
    FUZZ_ASSERT(kv);
    int rc = fmt_vocab_load(kv, path, err, sizeof err);
    fuzz_check_err("fmt_vocab_load", rc, FMT_EARG, err, sizeof err);
    if (rc == 0) {
        eng_tok *t = NULL;
        err[0] = '\0';
        rc = eng_tok_load(&t, kv, err, sizeof err);
        fuzz_check_err("eng_tok_load", rc, ENG_ELAST, err, sizeof err);
        if (rc == 0) {
            fuzz_tok_walk(t);
            for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
                fuzz_tok_roundtrip(t, texts[i], strlen(texts[i]), (int)(i & 1),
                                   (int)(i >> 1 & 1), NULL);
            eng_tok_free(t);
        }
    }
    fmt_kv_free(kv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_unpack(data, size) < 0) {
        fuzz_write("tokenizer.bin", data, size);
        load_and_use(fuzz_path("tokenizer.bin"));
        return 0;
    }
    load_and_use(fuzz_dir());
    if (fuzz_unpacked("vocab.json"))
        load_and_use(fuzz_path("vocab.json"));
    return 0;
}
