/*
 * fmt_vocab.h — private to fmt_vocab*.c: the vocabulary builder (fmt_vb,
 * fmt_vocab_vb.c) that the tokenizer-file readers fill, a few path
 * helpers, and the Hugging Face readers (fmt_vocab_hf.c) that the
 * dispatcher fmt_vocab_load (fmt_vocab.c) calls.
 *
 * A vocabulary is built as parallel arrays indexed by token id, grown on
 * demand as ids arrive in any order (JSON files name their own ids):
 *   tok[id]   text (not NUL-terminated; borrowed from the parsed file or
 *             owned by the builder's pool), len[id] its bytes
 *   type[id]  llama.cpp's token type (FMT_TT_*), score[id] the
 *             SentencePiece score
 * plus the merges in rank order ("a b" strings, mer[r] and mlen[r]) and a
 * text -> id index built once the tokens are in.  Ids no entry names stay
 * NULL until fmt_vb_fill_holes pads them.
 */
#ifndef CFLOW_FMT_VOCAB_H
#define CFLOW_FMT_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "format/fmt_impl.h"

#define FMT_VOCAB_MAX_TOKENS (1u << 24)

/* llama.cpp's token types */
enum { FMT_TT_NORMAL = 1, FMT_TT_UNKNOWN = 2, FMT_TT_CONTROL = 3,
       FMT_TT_USER = 4, FMT_TT_UNUSED = 5, FMT_TT_BYTE = 6 };

/* The vocabulary being built (see above). */
typedef struct fmt_vb {
    const char **tok;     /* [cap] text (borrowed from json or from pool) */
    size_t      *len;     /* [cap] bytes of tok[id] */
    int32_t     *type;    /* [cap] FMT_TT_* */
    float       *score;   /* [cap] */
    uint32_t     n, cap;  /* ids in use (highest + 1), allocated */
    uint32_t     lim;     /* ids lie below it (0: FMT_VOCAB_MAX_TOKENS) */
    char       **pool;    /* strings we own */
    size_t       n_pool, cap_pool;
    const char **mer;     /* [cap_mer] merges "a b", in rank order */
    size_t      *mlen;    /* [cap_mer] */
    size_t       n_mer, cap_mer;
    fmt_names    idx;     /* text -> id, built by fmt_vb_index */
} fmt_vb;

/* ---- fmt_vocab_vb.c ---------------------------------------------------- */
void fmt_vb_free(fmt_vb *v);
/* Keep a copy of s[0..n) for the life of v; NULL on ENOMEM. */
const char *fmt_vb_own(fmt_vb *v, const char *s, size_t n);
/* Bound the ids of a file holding n_entries entries (see fmt_vocab_vb.c). */
void fmt_vb_bound(fmt_vb *v, size_t n_entries);
/* Token id := s[0..n) (borrowed) of type: 0, -1 out of memory, -2 an id at
 * or past v->lim. */
int fmt_vb_set(fmt_vb *v, uint32_t id, const char *s, size_t n,
               int32_t type);
/* fmt_vb_set's failure r for id as an FMT_E* code and a message naming
 * path. */
int fmt_vb_set_err(const fmt_vb *v, int r, int64_t id, const char *path,
                   char *err, size_t errlen);
/* Append the merge s[0..n) ("a b", borrowed); 0 or -1 on ENOMEM. */
int fmt_vb_merge(fmt_vb *v, const char *s, size_t n);
/* Holes in the id range become "[PADn]" unused tokens; 0 or -1. */
int fmt_vb_fill_holes(fmt_vb *v);
/* text -> id index over the current tokens (first id wins); 0 or -1. */
int fmt_vb_index(fmt_vb *v);
/* The id of text s[0..n) in the index, or -1. */
int32_t fmt_vb_find(const fmt_vb *v, const char *s, size_t n);
/* Is s[0..n) a byte token "<0xNN>"? */
int fmt_vb_is_byte_token(const char *s, size_t n);

/* dir "/" name into out[cap]; 1 when it fits and names something (a
 * regular file, or a FIFO or folder that the reader then refuses), else 0. */
int fmt_vocab_file_in(char *out, size_t cap, const char *dir,
                      const char *name);
/* The directory part of path (without the slash; "." for none) into out. */
void fmt_vocab_dir_of(const char *path, char *out, size_t cap);

/* ---- fmt_vocab_hf.c: Hugging Face tokenizer files into kv ------------- */
/* tokenizer.json at path (tokenizer_config.json beside it optional). */
int fmt_vocab_hf_json(fmt_kv *kv, const char *path, char *err,
                      size_t errlen);
/* vocab.json at vpath + merges.txt at mpath. */
int fmt_vocab_hf_merges(fmt_kv *kv, const char *vpath, const char *mpath,
                        char *err, size_t errlen);

#endif /* CFLOW_FMT_VOCAB_H */
