/*
 * fmt_vocab.c — tokenizer files on their own: read a llama2.c tokenizer.bin
 * or Hugging Face tokenizer files (fmt_vocab_hf.c) and describe the
 * vocabulary with the GGUF keys the engine's tokenizer reads
 * (tokenizer.ggml.*), so that one loader serves GGUF, .cflow and these
 * files alike.  fmt_vocab_load tells the kinds apart: a directory holds
 * tokenizer.json, or vocab.json + merges.txt; a file is vocab.json (with
 * merges.txt beside it), JSON (tokenizer.json under any name), or else a
 * tokenizer.bin.
 *
 * llama2.c tokenizer.bin (little endian, no header besides the first word)
 *   i32 max_token_length
 *   then, until the end of the file, per token:
 *     f32 score, i32 len, len bytes of text (no NUL)
 *   The token count is not stored (run.c takes it from the checkpoint):
 *   the file must end exactly after the last token.  Spaces are stored as
 *   ' '; ids 0, 1, 2 are unk, BOS ("\n<s>\n") and EOS ("\n</s>\n").
 *   Converted the way llama.cpp's convert-llama2c-to-ggml does: texts
 *   "<unk>", "<s>", "</s>" for ids 0..2 (types unknown, control, control),
 *   "<0xNN>" byte tokens typed BYTE, ' ' written U+2581, model "llama".
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/fmt_vocab.h"

static const char *base_of(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* ---- llama2.c ---------------------------------------------------------- */
static int load_llama2c(fmt_kv *kv, const char *path, char *err,
                        size_t errlen)
{
    fmt_map m;
    fmt_vb v = {0};
    int rc = FMT_ENOMEM;
    size_t off = 4;
    int32_t maxlen;
    if ((rc = fmt_map_open(&m, path, err, errlen)) < 0)
        return rc;
    if (m.n < 4 + 8) {
        fmt_err(err, errlen, "%s: too short for a llama2.c tokenizer", path);
        fmt_map_close(&m);
        return FMT_EFORMAT;
    }
    memcpy(&maxlen, m.p, 4);
    if (maxlen <= 0 || maxlen > 65536) {
        fmt_err(err, errlen, "%s: not a llama2.c tokenizer (max_token_length "
                "%d)", path, maxlen);
        fmt_map_close(&m);
        return FMT_EFORMAT;
    }
    while (off < m.n) {
        float score;
        int32_t len;
        uint32_t id = v.n;
        const char *text;
        size_t tl;
        char *esc;
        if (m.n - off < 8) {
            fmt_err(err, errlen, "%s: truncated after token %u", path, id);
            rc = FMT_EFORMAT;
            goto out;
        }
        memcpy(&score, m.p + off, 4);
        memcpy(&len, m.p + off + 4, 4);
        off += 8;
        if (len < 0 || len > maxlen || (size_t)len > m.n - off) {
            fmt_err(err, errlen, "%s: token %u has a bad length %d", path, id,
                    len);
            rc = FMT_EFORMAT;
            goto out;
        }
        if (id >= FMT_VOCAB_MAX_TOKENS) {
            fmt_err(err, errlen, "%s: too many tokens", path);
            rc = FMT_EFORMAT;
            goto out;
        }
        text = (const char *)m.p + off;
        tl = (size_t)len;
        off += tl;
        /* write ' ' as U+2581 (3 bytes) */
        esc = malloc(tl * 3 + 1);
        if (!esc)
            goto nomem;
        size_t el = 0;
        for (size_t i = 0; i < tl; i++) {
            if (text[i] == ' ') {
                memcpy(esc + el, "\xe2\x96\x81", 3);
                el += 3;
            } else {
                esc[el++] = text[i];
            }
        }
        const char *own;
        int32_t type = FMT_TT_NORMAL;
        /* ids 0..2 get SentencePiece's names (llama2.c stores "\n<s>\n") */
        if (id <= 2) {
            static const char *const nm[3] = {"<unk>", "<s>", "</s>"};
            el = strlen(nm[id]);
            own = fmt_vb_own(&v, nm[id], el);
            type = id == 0 ? FMT_TT_UNKNOWN : FMT_TT_CONTROL;
        } else {
            own = fmt_vb_own(&v, esc, el);
            if (el == 0)
                type = FMT_TT_CONTROL;
            else if (fmt_vb_is_byte_token(esc, el))
                type = FMT_TT_BYTE;
        }
        free(esc);
        if (!own || fmt_vb_set(&v, id, own, el, type) < 0)
            goto nomem;
        v.score[id] = score;
    }
    if (v.n < 3) {
        fmt_err(err, errlen, "%s: only %u tokens", path, v.n);
        rc = FMT_EFORMAT;
        goto out;
    }
    if (fmt_kv_set_str(kv, "tokenizer.ggml.model", "llama", 5) < 0 ||
        fmt_kv_set_arr_str(kv, "tokenizer.ggml.tokens", v.tok, v.len, v.n) <
            0 ||
        fmt_kv_set_arr_f32(kv, "tokenizer.ggml.scores", v.score, v.n) < 0 ||
        fmt_kv_set_arr_i32(kv, "tokenizer.ggml.token_type", v.type, v.n) <
            0 ||
        fmt_kv_set_u32(kv, "tokenizer.ggml.bos_token_id", 1) < 0 ||
        fmt_kv_set_u32(kv, "tokenizer.ggml.eos_token_id", 2) < 0 ||
        fmt_kv_set_u32(kv, "tokenizer.ggml.unknown_token_id", 0) < 0 ||
        fmt_kv_set_bool(kv, "tokenizer.ggml.add_bos_token", 1) < 0 ||
        fmt_kv_set_bool(kv, "tokenizer.ggml.add_space_prefix", 1) < 0)
        goto nomem;
    rc = FMT_OK;
    goto out;
nomem:
    fmt_err(err, errlen, "%s: out of memory", path);
    rc = FMT_ENOMEM;
out:
    fmt_vb_free(&v);
    fmt_map_close(&m);
    return rc;
}

int fmt_vocab_load(fmt_kv *kv, const char *path, char *err, size_t errlen)
{
    struct stat st;
    char a[4096], b[4096];
    if (!kv || !path || !*path) {
        fmt_err(err, errlen, "fmt_vocab_load: no path");
        return FMT_EARG;
    }
    if (stat(path, &st) != 0) {
        fmt_err(err, errlen, "%s: %s", path, strerror(errno));
        return FMT_EIO;
    }
    if (S_ISDIR(st.st_mode)) {
        if (fmt_vocab_file_in(a, sizeof a, path, "tokenizer.json"))
            return fmt_vocab_hf_json(kv, a, err, errlen);
        if (fmt_vocab_file_in(a, sizeof a, path, "vocab.json") &&
            fmt_vocab_file_in(b, sizeof b, path, "merges.txt"))
            return fmt_vocab_hf_merges(kv, a, b, err, errlen);
        if (fmt_vocab_file_in(a, sizeof a, path, "tokenizer.model"))
            fmt_err(err, errlen, "%s: only tokenizer.model (SentencePiece "
                    "protobuf) is there, which is not supported: need "
                    "tokenizer.json or vocab.json + merges.txt", path);
        else
            fmt_err(err, errlen, "%s: no tokenizer.json or vocab.json + "
                    "merges.txt in this directory", path);
        return FMT_EFORMAT;
    }
    if (!S_ISREG(st.st_mode)) {
        fmt_err(err, errlen, "%s: not a regular file (it is %s)", path,
                fmt_file_kind(st.st_mode));
        return FMT_EIO;
    }
    if (!strcmp(base_of(path), "vocab.json")) {
        char dir[4096];
        fmt_vocab_dir_of(path, dir, sizeof dir);
        if (!fmt_vocab_file_in(b, sizeof b, dir, "merges.txt")) {
            fmt_err(err, errlen, "%s: no merges.txt beside it", path);
            return FMT_EFORMAT;
        }
        return fmt_vocab_hf_merges(kv, path, b, err, errlen);
    }
    {
        /* JSON starts with '{' (after white space); tokenizer.bin starts
         * with a small int32, whose first byte is never '{' followed by
         * JSON.  Peek at the first bytes. */
        char head[4096];
        size_t got, i = 0;
        uint64_t size;
        int rc = fmt_file_head(path, head, sizeof head, &got, &size, err, errlen);
        if (rc < 0)
            return rc;
        while (i < got && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' ||
                           head[i] == '\t'))
            i++;
        if (i < got && head[i] == '{')
            return fmt_vocab_hf_json(kv, path, err, errlen);
    }
    return load_llama2c(kv, path, err, errlen);
}
