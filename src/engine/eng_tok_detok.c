/*
 * eng_tok_detok.c — decoding: token ids -> text, streamed.  Bytes come out
 * whole UTF-8 characters at a time (a character split across tokens is
 * held until it completes); malformed sequences become U+FFFD.  And the
 * byte-wise comparison of two token runs that keeps a chat's sampled
 * replies in its prompt (eng_tok_splice_cached).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_tok_impl.h"

/* ---- streaming detokeniser --------------------------------------------- */
void eng_detok_init(eng_detok *d)
{
    memset(d, 0, sizeof *d);
    d->prev = -1;
}

/* Append bytes s[0..n) to out[*o..cap) only if all of them fit. */
static void put(char *out, size_t cap, size_t *o, const void *s, size_t n)
{
    if (*o + n > cap)
        return;
    memcpy(out + *o, s, n);
    *o += n;
}

static void put_fffd(char *out, size_t cap, size_t *o)
{
    put(out, cap, o, "\xef\xbf\xbd", 3);
}

/* Bytes the sequence led by c takes (0: c cannot lead). */
static unsigned seq_len(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

/* May c follow lead as the second byte?  (Excludes overlong forms,
 * surrogates and code points past U+10FFFF.) */
static int second_ok(unsigned char lead, unsigned char c)
{
    switch (lead) {
    case 0xE0: return c >= 0xA0 && c <= 0xBF;
    case 0xED: return c >= 0x80 && c <= 0x9F;
    case 0xF0: return c >= 0x90 && c <= 0xBF;
    case 0xF4: return c >= 0x80 && c <= 0x8F;
    default:   return c >= 0x80 && c <= 0xBF;
    }
}

static void detok_feed(eng_detok *d, const unsigned char *s, size_t n,
                       char *out, size_t cap, size_t *o)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (d->n_pend > 0) {
            unsigned need = seq_len(d->pend[0]);
            int ok = d->n_pend == 1 ? second_ok(d->pend[0], c)
                                    : (c >= 0x80 && c <= 0xBF);
            if (ok) {
                d->pend[d->n_pend++] = c;
                if (d->n_pend == need) {
                    put(out, cap, o, d->pend, need);
                    d->n_pend = 0;
                }
                continue;
            }
            /* the held prefix can never complete: one U+FFFD for it, then
             * c starts afresh */
            put_fffd(out, cap, o);
            d->n_pend = 0;
        }
        switch (seq_len(c)) {
        case 0:
            put_fffd(out, cap, o);
            break;
        case 1:
            put(out, cap, o, &c, 1);
            break;
        default:
            d->pend[0] = c;
            d->n_pend = 1;
            break;
        }
    }
}

size_t eng_detok_push(eng_detok *d, const eng_tok *t, int32_t id, char *out,
                      size_t cap)
{
    int32_t prev = d->prev;
    size_t o = 0, len;
    const char *p;
    d->prev = id;
    if (!t || id < 0 || (uint32_t)id >= t->n)
        return 0;
    /* control and unknown tokens are not text */
    if (t->attr[id] & (TA_CONTROL | TA_UNKNOWN))
        return 0;
    p = eng_tok_piece(t, id, &len);
    /* SentencePiece: the space that encoding put before the first word is
     * not part of the text (llama2.c run.c's decode) */
    if (t->spm && t->add_space_prefix && prev >= 0 && prev == t->bos &&
        len > 0 && p[0] == ' ') {
        p++;
        len--;
    }
    detok_feed(d, (const unsigned char *)p, len, out, cap, &o);
    return o;
}

size_t eng_detok_flush(eng_detok *d, char *out, size_t cap)
{
    size_t o = 0;
    if (d->n_pend > 0) {
        put_fffd(out, cap, &o);
        d->n_pend = 0;
    }
    return o;
}

/* ---- a prompt against the tokens a cache holds -------------------------- */
/* The next byte of ids[0..n) from token *i, byte *off on, or -1 at the
 * end; (*i, *off) moves past it, to the next token's start after a
 * token's last byte, so *off == 0 says a token boundary. */
static int next_byte(const eng_tok *tok, const int32_t *ids, size_t n, size_t *i, size_t *off)
{
    for (; *i < n; (*i)++, *off = 0) {
        size_t len = 0;
        const char *p = eng_tok_piece(tok, ids[*i], &len);
        if (p && *off < len) {
            int c = (unsigned char)p[(*off)++];
            if (*off == len)
                (*i)++, *off = 0;
            return c;
        }
    }
    return -1;
}

/* engine.h states the contract; the TUI and cflow serve call it. */
int eng_tok_splice_cached(const eng_tok *tok, const int32_t *kv, size_t n_kv, size_t max,
                          int32_t **ids, size_t *n)
{
    const int32_t *v = *ids;
    size_t k0 = 0;
    while (k0 < n_kv && k0 < *n && kv[k0] == v[k0])
        k0++;
    if (k0 == n_kv || k0 == *n || k0 == 0)
        return 0;
    size_t ai = k0, ao = 0, bi = k0, bo = 0, best_a = k0, best_b = k0;
    for (;;) {
        /* both at a token boundary with equal bytes so far: a splice point */
        if (ao == 0 && bo == 0)
            best_a = ai, best_b = bi;
        int ca = next_byte(tok, kv, n_kv, &ai, &ao), cb = next_byte(tok, v, *n, &bi, &bo);
        if (ca < 0 || cb < 0 || ca != cb)
            break;
    }
    if (best_a == k0)
        return 0;
    size_t m = best_a + (*n - best_b);
    if (max && m >= max)
        return 0;
    int32_t *w = malloc((m ? m : 1) * sizeof *w);
    if (!w)
        return -1;
    memcpy(w, kv, best_a * sizeof *w);
    memcpy(w + best_a, v + best_b, (*n - best_b) * sizeof *w);
    free(*ids);
    *ids = w;
    *n = m;
    return 0;
}
