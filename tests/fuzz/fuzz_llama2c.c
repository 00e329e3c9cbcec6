/*
 * fuzz_llama2c.c — legacy llama2.c checkpoints with their tokenizer.bin,
 * through fmt_src_open (which detects the format from a plausible header
 * and then insists on the exact size the geometry implies), the tokenizer
 * built from them, and the converter.
 *
 * Input: an archive (fuzz.h) holding model.bin and tokenizer.bin; any other
 * input is taken whole as model.bin, without a tokenizer.
 * Checks: as fuzz_gguf: every bound tensor read in full, conversion output
 * accepted by the reader, one-line errors.
 */
#include "config.h"

#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";
    if (fuzz_unpack(data, size) < 0)
        fuzz_write("model.bin", data, size);
    fmt_src *s = NULL;
    int rc = fmt_src_open(&s, fuzz_path("model.bin"),
                          fuzz_path("tokenizer.bin"), err, sizeof err);
    fuzz_check_err("fmt_src_open", rc, FMT_EARG, err, sizeof err);
    if (rc < 0)
        return 0;
    fuzz_walk_src(s);
    fuzz_convert_check(s);
    fmt_src_close(s);
    return 0;
}
