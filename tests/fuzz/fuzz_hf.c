/*
 * fuzz_hf.c — Hugging Face model directories: config.json (json-c, then
 * every geometry key checked), safetensors headers (JSON, dtypes, shapes,
 * data_offsets against the data), sharded checkpoints through
 * model.safetensors.index.json, and the tokenizer files beside them; then
 * the tokenizer and the converter on what opens.
 *
 * Input: an archive (fuzz.h) of the directory's files, e.g.
 *   @@file config.json / @@file model.safetensors / @@file tokenizer.json
 * Checks: as fuzz_gguf.
 */
#include "config.h"

#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";
    if (fuzz_unpack(data, size) < 0)
        return 0;
    fmt_src *s = NULL;
    int rc = fmt_src_open(&s, fuzz_dir(), NULL, err, sizeof err);
    fuzz_check_err("fmt_src_open", rc, FMT_EARG, err, sizeof err);
    if (rc < 0)
        return 0;
    FUZZ_ASSERT(strcmp(fmt_src_kind(s), "hf") == 0);
    fuzz_walk_src(s);
    fuzz_convert_check(s);
    fmt_src_close(s);
    return 0;
}
