/*
 * fuzz.h — what the fuzz targets share (fuzz_common.c).
 *
 * Every target is one plain C file defining LLVMFuzzerTestOneInput (and,
 * where it needs set-up, LLVMFuzzerInitialize).  It is linked two ways:
 *   - with clang -fsanitize=fuzzer: a libFuzzer binary (`make fuzz`);
 *   - with fuzz_replay.c's main(): a test that feeds every seed and every
 *     regression input to the target once (`make check`).
 *
 * The targets drive the REAL parsers from src/format and src/engine.  Those
 * parsers take paths, so inputs are written to files in a scratch folder
 * private to the process (fuzz_dir()).  Multi-file inputs (a Hugging Face
 * directory, a llama2.c checkpoint beside its tokenizer) use a small
 * archive form that libFuzzer mutates like any other bytes:
 *
 *     @@file NAME\n<bytes of NAME>\n@@file NAME2\n<bytes of NAME2>...
 *
 * a file's bytes run to the next "\n@@file " or to the end of the input.
 * Only the names in fuzz_common.c's list are written (no paths); others are
 * ignored, and a name given twice keeps its last bytes.
 *
 * Checks beyond "no crash": a failing call must return one of the module's
 * error codes and leave one non-empty line in err (the project's error
 * contract); what succeeds is walked end to end (every tensor's bytes, every
 * tile's payload, every token's piece) so that an over-read shows up under
 * AddressSanitizer.  Read-only file mappings made by the library are served
 * from exact-size heap buffers (fuzz_common.c wraps mmap with the linker's
 * --wrap), so reading one byte past the end of a mapped file is a
 * heap-buffer-overflow instead of a silent read of the page's zero tail.
 */
#ifndef CFLOW_FUZZ_H
#define CFLOW_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "format/cflow_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Report a broken invariant and abort (libFuzzer saves the input). */
void fuzz_fail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
#define FUZZ_ASSERT(c)                                                      \
    do {                                                                    \
        if (!(c))                                                           \
            fuzz_fail("%s:%d: assertion failed: %s", __FILE__, __LINE__,    \
                      #c);                                                  \
    } while (0)

/* The process's scratch folder (created on first use, removed at exit)
 * and dir/name inside it (a static buffer per call site is not needed: the
 * result is malloc'd once per name and kept). */
const char *fuzz_dir(void);
const char *fuzz_path(const char *name);
/* Write buf to fuzz_path(name), replacing it. */
void fuzz_write(const char *name, const void *buf, size_t len);
/* Remove every archive name from fuzz_dir(), then write the archive's
 * files.  Returns how many were written, or -1 when data is not an archive
 * (it does not start with "@@file "). */
int fuzz_unpack(const uint8_t *data, size_t size);
/* Is name among the files the last fuzz_unpack wrote? */
int fuzz_unpacked(const char *name);

/* Error contract of a failed call: rc in [lo, -1], err one non-empty line. */
void fuzz_check_err(const char *what, int rc, int lo, const char *err,
                    size_t errlen);

/* $CFLOW_SHARED/rel (default: the configured CFLOW_SHARED). */
const char *fuzz_shared(const char *rel);

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
int fuzz_utf8_valid(const char *s, size_t n);

/* A loaded vocabulary: special ids in range, every id's piece (within
 * eng_tok_max_piece, readable to its last byte) and class. */
void fuzz_tok_walk(const eng_tok *t);
/* Encode text (twice, with a short buffer first: the ids must agree) and
 * stream the ids back through eng_detok_push, whose output must be valid
 * UTF-8 within the documented buffer bound.  Returns the decoded bytes
 * (malloc'd, *out_len) when out_len is not NULL. */
char *fuzz_tok_roundtrip(const eng_tok *t, const char *text, size_t len,
                         int add_special, int parse_special, size_t *out_len);
/* Walk an opened source model: hparams, every role's tensor bytes. */
void fuzz_walk_src(const fmt_src *s);
/* Walk an opened .cflow: every stream's tiles (dequantised), vectors and
 * experts, and the tokenizer in its metadata. */
void fuzz_walk_model(const fmt_model *m);
/* Convert an opened source to .cflow and to .vflow in the scratch folder;
 * when the writer succeeds the reader must accept its output, with the
 * same geometry, and the two layouts must hold the same model (tile for
 * tile, byte for byte). */
void fuzz_convert_check(const fmt_src *s);

#endif
