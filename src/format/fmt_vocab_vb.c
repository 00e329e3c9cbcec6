/*
 * fmt_vocab_vb.c — the vocabulary builder (fmt_vb, described in
 * fmt_vocab.h) that the tokenizer-file readers of fmt_vocab.c and
 * fmt_vocab_hf.c fill, and the path helpers they share.
 *
 * Growth: the id arrays double from 1024 as ids arrive, new slots empty
 * (NULL text, type NORMAL, score 0); the merges double from 4096.  Texts
 * the builder makes itself (escaped llama2.c pieces, joined [a, b] merges,
 * "[PADn]") live in its pool, freed with it; the others are borrowed from
 * the parsed file, which must outlive the builder.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/fmt_vocab.h"

void fmt_vb_free(fmt_vb *v)
{
    for (size_t i = 0; i < v->n_pool; i++)
        free(v->pool[i]);
    free(v->pool);
    free(v->tok);
    free(v->len);
    free(v->type);
    free(v->score);
    free(v->mer);
    free(v->mlen);
    fmt_names_free(&v->idx);
}

/* Keep a copy of s[0..n) for the life of v; NULL on ENOMEM. */
const char *fmt_vb_own(fmt_vb *v, const char *s, size_t n)
{
    char *c;
    if (v->n_pool == v->cap_pool) {
        size_t nc = v->cap_pool ? v->cap_pool * 2 : 64;
        char **np = realloc(v->pool, nc * sizeof *np);
        if (!np)
            return NULL;
        v->pool = np;
        v->cap_pool = nc;
    }
    c = malloc(n + 1);
    if (!c)
        return NULL;
    memcpy(c, s, n);
    c[n] = 0;
    v->pool[v->n_pool++] = c;
    return c;
}

/* Make room for ids below n (new entries empty). */
static int vb_grow(fmt_vb *v, uint32_t n)
{
    if (n > v->cap) {
        uint32_t nc = v->cap ? v->cap : 1024;
        while (nc < n)
            nc *= 2;
        const char **nt = realloc(v->tok, nc * sizeof *nt);
        if (!nt)
            return -1;
        v->tok = nt;
        size_t *nl = realloc(v->len, nc * sizeof *nl);
        if (!nl)
            return -1;
        v->len = nl;
        int32_t *ny = realloc(v->type, nc * sizeof *ny);
        if (!ny)
            return -1;
        v->type = ny;
        float *ns = realloc(v->score, nc * sizeof *ns);
        if (!ns)
            return -1;
        v->score = ns;
        for (uint32_t i = v->cap; i < nc; i++) {
            v->tok[i] = NULL;
            v->len[i] = 0;
            v->type[i] = FMT_TT_NORMAL;
            v->score[i] = 0;
        }
        v->cap = nc;
    }
    if (n > v->n)
        v->n = n;
    return 0;
}

/* Ids from JSON files name their own slots, and every slot below the
 * highest becomes a token (holes are padded, fmt_vb_fill_holes).  So one entry
 * with id 15000000 in a 30 KB file would make 15 M tokens: an allocation,
 * a run time and an output out of all proportion to the input.  A file
 * holding n entries may use ids below 2n + 65536 (real vocabularies are
 * dense; a few thousand unused ids is already much). */
void fmt_vb_bound(fmt_vb *v, size_t n_entries)
{
    uint64_t lim = 2 * (uint64_t)n_entries + 65536;
    v->lim = lim < FMT_VOCAB_MAX_TOKENS ? (uint32_t)lim : FMT_VOCAB_MAX_TOKENS;
}

/* 0, -1 out of memory, -2 an id at or past v->lim */
int fmt_vb_set(fmt_vb *v, uint32_t id, const char *s, size_t n, int32_t type)
{
    if (id >= (v->lim ? v->lim : FMT_VOCAB_MAX_TOKENS))
        return -2;
    if (vb_grow(v, id + 1) < 0)
        return -1;
    v->tok[id] = s;
    v->len[id] = n;
    v->type[id] = type;
    return 0;
}

int fmt_vb_merge(fmt_vb *v, const char *s, size_t n)
{
    if (v->n_mer == v->cap_mer) {
        size_t nc = v->cap_mer ? v->cap_mer * 2 : 4096;
        const char **nm = realloc(v->mer, nc * sizeof *nm);
        if (!nm)
            return -1;
        v->mer = nm;
        size_t *nl = realloc(v->mlen, nc * sizeof *nl);
        if (!nl)
            return -1;
        v->mlen = nl;
        v->cap_mer = nc;
    }
    v->mer[v->n_mer] = s;
    v->mlen[v->n_mer] = n;
    v->n_mer++;
    return 0;
}

/* Holes in the id range become "[PADn]" unused tokens, as llama.cpp's
 * converter writes them. */
int fmt_vb_fill_holes(fmt_vb *v)
{
    for (uint32_t i = 0; i < v->n; i++)
        if (!v->tok[i]) {
            char b[32];
            int l = snprintf(b, sizeof b, "[PAD%u]", i);
            if (!(v->tok[i] = fmt_vb_own(v, b, (size_t)l)))
                return -1;
            v->len[i] = (size_t)l;
            v->type[i] = FMT_TT_UNUSED;
        }
    return 0;
}

/* text -> id index over the current tokens (first id wins). */
int fmt_vb_index(fmt_vb *v)
{
    fmt_names_free(&v->idx);
    memset(&v->idx, 0, sizeof v->idx);
    for (uint32_t i = 0; i < v->n; i++)
        if (v->tok[i] &&
            fmt_names_put(&v->idx, v->tok[i], v->len[i], i, NULL) < 0)
            return -1;
    return 0;
}

int32_t fmt_vb_find(const fmt_vb *v, const char *s, size_t n)
{
    size_t id;
    if (fmt_names_get(&v->idx, s, n, &id) == 0)
        return (int32_t)id;
    return -1;
}

/* Is s[0..n) a byte token "<0xNN>"? */
int fmt_vb_is_byte_token(const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEFabcdef";
    return n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && s[3] && s[4] &&
           strchr(hex, s[3]) && strchr(hex, s[4]);
}

/* fmt_vb_set's failure as an error code and message. */
int fmt_vb_set_err(const fmt_vb *v, int r, int64_t id, const char *path,
                   char *err, size_t errlen)
{
    if (r == -2) {
        fmt_err(err, errlen, "%s: token id %lld is far past the ids this "
                "tokenizer's entries can fill (limit %u): a vocabulary of "
                "mostly holes", path, (long long)id, v->lim);
        return FMT_EFORMAT;
    }
    fmt_err(err, errlen, "%s: out of memory", path);
    return FMT_ENOMEM;
}

/* ---- small file helpers ------------------------------------------------ */
static int path_join(char *out, size_t cap, const char *dir,
                     const char *name)
{
    int l = snprintf(out, cap, "%s/%s", dir, name);
    return (l < 0 || (size_t)l >= cap) ? -1 : 0;
}

/* The directory part of path (without the slash) into out. */
void fmt_vocab_dir_of(const char *path, char *out, size_t cap)
{
    const char *s = strrchr(path, '/');
    size_t l = 0;
    if (!s) {
        snprintf(out, cap, ".");
        return;
    }
    l = (size_t)(s - path);
    if (l == 0)
        l = 1;  /* "/file" -> "/" */
    if (l >= cap)
        l = cap - 1;
    memcpy(out, path, l);
    out[l] = 0;
}

/* Anything under the name counts: a FIFO or a folder in a tokenizer
 * file's place is then refused by fmt_map_open in words, never skipped
 * as if the file were missing. */
static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

int fmt_vocab_file_in(char *out, size_t cap, const char *dir,
                      const char *name)
{
    return path_join(out, cap, dir, name) == 0 && exists(out);
}
