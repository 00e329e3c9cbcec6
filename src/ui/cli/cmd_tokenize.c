/*
 * cmd_tokenize.c — `cflow tokenize -m MODEL_OR_VOCAB [--bos] TEXT`
 *
 * Prints the ids on one line, space-separated.  No special tokens are added
 * unless --bos (llama.cpp's add_special = false), and special-token text is
 * matched only with --parse-special.  MODEL_OR_VOCAB may be a .cflow model,
 * a GGUF (vocabulary-only files too), a llama2.c tokenizer.bin, a HF
 * tokenizer.json or a HF directory.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "format/cflow_format.h"
#include "ui/cli/cli.h"

static const int tokenize_opts[] = { UI_O_TOK_MODEL, UI_O_BOS, UI_O_PARSE_SPECIAL,
                                     UI_O_PIECES, UI_O_HELP, UI_O_END };

static void help(const ui_settings *d)
{
    printf("usage: cflow tokenize [-m MODEL_OR_VOCAB] [--bos] [--parse-special] TEXT\n\n"
           "Print the token ids of TEXT on one line.\n\n");
    ui_opts_help(stdout, tokenize_opts, d);
}

int ui_cmd_tokenize(int argc, char **argv)
{
    static const ui_optset set = { "cflow tokenize", tokenize_opts, help, "TEXT", 1 };
    ui_settings o;
    int rc = UI_EXIT_ERR, first;
    char err[512];
    fmt_model *m = NULL;
    fmt_gguf *g = NULL;
    fmt_kv *own = NULL;
    const fmt_kv *kv = NULL;
    eng_tok *tok = NULL;
    int32_t *ids = NULL;

    ui_settings_default(&o);
    if ((rc = ui_opts_parse(&set, argc, argv, &o, &first)) >= 0)
        return rc;
    rc = UI_EXIT_ERR;
    const char *path = o.model;
    if (!path && !(path = ui_default_model()))
        return ui_usage_error("tokenize", "no model: give -m MODEL_OR_VOCAB");
    const char *text = argv[first];

    /* the first bytes say the container; a folder is a tokenizer folder.
     * A FIFO or a device is refused here, before any open that blocks. */
    char head[8] = { 0 };
    size_t got = 0;
    uint64_t size;
    struct stat st;
    if (!(stat(path, &st) == 0 && S_ISDIR(st.st_mode)) &&
        fmt_file_head(path, head, sizeof head, &got, &size, err, sizeof err))
        goto fail;
    if (got >= 5 && (!memcmp(head, "CFLOW", 5) || !memcmp(head, "VFLOW", 5))) {
        if (fmt_model_open(&m, path, err, sizeof err))
            goto fail;
        kv = fmt_model_kv(m);
    } else if (got >= 4 && !memcmp(head, "GGUF", 4)) {
        if (fmt_gguf_open(&g, path, err, sizeof err))
            goto fail;
        kv = fmt_gguf_kv(g);
    } else {
        own = fmt_kv_new();
        if (!own) {
            snprintf(err, sizeof err, "out of memory");
            goto fail;
        }
        if (fmt_vocab_load(own, path, err, sizeof err))
            goto fail;
        kv = own;
    }
    if (eng_tok_load(&tok, kv, err, sizeof err)) {
        rc = ui_error("%s: %s", path, err);
        goto out;
    }
    size_t n = 0;
    if (eng_tok_encode_alloc(tok, text, strlen(text), o.bos, o.parse_special, 0, 0, &ids, &n,
                             err, sizeof err)) {
        rc = ui_error("%s: cannot tokenize the text: %s", path, err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (o.pieces) {
            size_t pl;
            const char *p = eng_tok_piece(tok, ids[i], &pl);
            printf("%s%d:'", i ? " " : "", ids[i]);
            ui_fputs_escaped(stdout, p, pl);   /* a byte piece <0x0A> is \n, not a line */
            putchar('\'');
        } else {
            printf("%s%d", i ? " " : "", ids[i]);
        }
    }
    printf("\n");
    rc = UI_EXIT_OK;
    goto out;
fail:
    rc = ui_error("%s", err);
out:
    free(ids);
    eng_tok_free(tok);
    fmt_kv_free(own);
    fmt_gguf_close(g);
    fmt_model_close(m);
    return rc;
}
