/*
 * fmt_src_open.c — which reader opens a source path.
 *
 * A directory is a Hugging Face model (fmt_hf.c); a file starting "GGUF" is
 * a GGUF file (fmt_src_gguf.c); a file whose header and size fit a legacy
 * llama2.c checkpoint is one (fmt_llama2c.c).  This dispatcher sits above
 * the readers, which build the source with fmt_src.c's toolkit.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"
#include "format/fmt_layout.h"

int fmt_src_open(fmt_src **out, const char *path, const char *tokenizer_path,
                 char *err, size_t errlen)
{
    struct stat st;
    int rc;
    if (!out || !path) {
        fmt_err(err, errlen, "fmt_src_open: bad arguments");
        return FMT_EARG;
    }
    *out = NULL;
    fmt_src *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        fmt_err(err, errlen, "%s: out of memory", path);
        return FMT_ENOMEM;
    }
    if (stat(path, &st) < 0) {
        fmt_err(err, errlen, "%s: %s", path, strerror(errno));
        rc = FMT_EIO;
        goto fail;
    }
    if (S_ISDIR(st.st_mode)) {
        s->kind = "hf";
        rc = fmt_hf_open(s, path, tokenizer_path, err, errlen);
    } else {
        uint8_t head[32];
        size_t got;
        uint64_t size;
        if ((rc = fmt_file_head(path, head, sizeof head, &got, &size, err, errlen)) < 0)
            goto fail;
        if (got >= 4 && memcmp(head, "GGUF", 4) == 0) {
            s->kind = "gguf";
            rc = fmt_src_gguf_open(s, err, errlen);
        } else if (fmt_llama2c_detect(path, head, got, size)) {
            s->kind = "llama2c";
            rc = fmt_llama2c_open(s, path, tokenizer_path, err, errlen);
        } else if (got >= 8 && (!memcmp(head, FMT_MAGIC, 8) || !memcmp(head, FMT_VMAGIC, 8))) {
            fmt_err(err, errlen, "%s: a .cflow model already (the sources are GGUF "
                    "files, llama2.c checkpoints and Hugging Face model directories)", path);
            rc = FMT_EUNSUP;
        } else {
            fmt_err(err, errlen, "%s: not a GGUF file, a llama2.c checkpoint "
                    "or a Hugging Face model directory", path);
            rc = FMT_EFORMAT;
        }
    }
    if (rc < 0)
        goto fail;
    *out = s;
    return FMT_OK;
fail:
    fmt_src_close(s);
    return rc;
}
