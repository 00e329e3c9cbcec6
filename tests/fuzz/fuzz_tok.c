/*
 * fuzz_tok.c — tokenizer encode and decode on real vocabularies, the text
 * being the fuzzed input.
 *
 * Vocabularies (loaded once, from the shared test material):
 *   0  llama.cpp's ggml-vocab-llama-spm.gguf   SentencePiece, byte fallback
 *   1  Qwen2's vocab.json + merges.txt         byte-level BPE, qwen2 regex
 *   2  llama2.c's tok512.bin                   small SentencePiece
 *   3  llama.cpp's ggml-vocab-gpt-2.gguf       byte-level BPE, GPT-2 regex
 * Input: byte 0 = vocabulary (bits 0-1), add_special (bit 2), parse_special
 * (bit 3); the rest is the text.
 * Checks (fuzz_tok_roundtrip): ids in range; encoding into a short buffer
 * agrees with the full encoding; the streaming detokeniser's output, piece
 * by piece and as a whole, is valid UTF-8 and never exceeds its documented
 * buffer bound.  And round trips, without special-token parsing, for any
 * valid UTF-8 text: byte-level BPE loses nothing, so decode(encode(text))
 * == text; SentencePiece (byte fallback) gives the text back too when BOS
 * is added (the detokeniser drops the prefix space after BOS), unless the
 * text holds U+2581 itself, which SentencePiece reads as a space.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#define N_VOCAB 4
static eng_tok *toks[N_VOCAB];
static fmt_gguf *ggufs[N_VOCAB];   /* GGUF keys point into the mapping */
static fmt_kv *kvs[N_VOCAB];

static void load(int i, const char *rel, int gguf)
{
    char err[512] = "";
    const char *path = fuzz_shared(rel);
    const fmt_kv *kv;
    if (gguf) {
        if (fmt_gguf_open(&ggufs[i], path, err, sizeof err) != 0)
            fuzz_fail("fuzz_tok needs %s: %s", path, err);
        kv = fmt_gguf_kv(ggufs[i]);
    } else {
        kvs[i] = fmt_kv_new();
        FUZZ_ASSERT(kvs[i]);
        if (fmt_vocab_load(kvs[i], path, err, sizeof err) != 0)
            fuzz_fail("fuzz_tok needs %s: %s", path, err);
        kv = kvs[i];
    }
    if (eng_tok_load(&toks[i], kv, err, sizeof err) != 0)
        fuzz_fail("%s: eng_tok_load: %s", path, err);
    fuzz_tok_walk(toks[i]);      /* once: the vocabularies never change */
}

static void unload(void)
{
    for (int i = 0; i < N_VOCAB; i++) {
        eng_tok_free(toks[i]);
        fmt_gguf_close(ggufs[i]);
        fmt_kv_free(kvs[i]);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    load(0, "tokenizer-tests/ggml-vocab-llama-spm.gguf", 1);
    load(1, "tokenizer-tests/qwen2-hf", 0);
    load(2, "models/tok512.bin", 0);
    load(3, "tokenizer-tests/ggml-vocab-gpt-2.gguf", 1);
    atexit(unload);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] & 3;
    int add_special = (data[0] >> 2) & 1;
    int parse_special = (data[0] >> 3) & 1;
    const eng_tok *t = toks[which];
    FUZZ_ASSERT(t);
    /* the text in its own buffer: no slack to hide an over-read */
    size_t len = size - 1;
    char *text = malloc(len ? len : 1);
    FUZZ_ASSERT(text);
    memcpy(text, data + 1, len);
    size_t olen = 0;
    char *out = fuzz_tok_roundtrip(t, text, len, add_special, parse_special,
                                   &olen);
    int spm = eng_tok_is_spm(t);
    int lossless = spm ? add_special && eng_tok_add_bos(t) &&
                             !memmem(text, len, "\xe2\x96\x81", 3)
                       : 1;
    if (lossless && !parse_special && fuzz_utf8_valid(text, len) &&
        (olen != len || memcmp(out, text, len) != 0))
        fuzz_fail("%s round trip: %zu bytes in, %zu out (%.*s)",
                  spm ? "SentencePiece" : "byte-level BPE", len, olen,
                  (int)(olen < 200 ? olen : 200), out);
    free(out);
    free(text);
    return 0;
}
