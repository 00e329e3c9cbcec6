/*
 * eng_tok.c — the vocabulary's lookups (text -> id, merge pairs), its
 * accessors and the bounds on how many tokens a text can be.  The
 * structure is described in eng_tok_impl.h.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_tok_impl.h"

/* ---- hashing ----------------------------------------------------------- */
uint64_t eng_tok_hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

uint64_t eng_tok_hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* The id of the token whose text is s[0..n), or -1. */
int32_t eng_tok_find(const eng_tok *t, const char *s, size_t n)
{
    uint32_t i = (uint32_t)eng_tok_hash_bytes(s, n) & t->hmask;
    for (;;) {
        uint32_t v = t->hash[i];
        if (v == 0)
            return -1;
        v--;
        if (t->tlen[v] == n && memcmp(t->text + t->toff[v], s, n) == 0)
            return (int32_t)v;
        i = (i + 1) & t->hmask;
    }
}

/* Rank of merging tokens l and r (result id in *res), or -1. */
int64_t eng_tok_merge_find(const eng_tok *t, int32_t l, int32_t r, int32_t *res)
{
    uint64_t key;
    uint32_t i;
    if (!t->mkey || l < 0 || r < 0)
        return -1;
    key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    i = (uint32_t)eng_tok_hash_u64(key) & t->mmask;
    for (;;) {
        if (t->mkey[i] == 0)
            return -1;
        if (t->mkey[i] == key) {
            *res = t->mres[i];
            return t->mrank[i];
        }
        i = (i + 1) & t->mmask;
    }
}

/* llama.cpp's unicode_len_utf8: the length the lead byte announces. */
size_t eng_tok_lead_len(unsigned char c)
{
    static const unsigned char lk[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                         1, 1, 1, 1, 2, 2, 3, 4};
    return lk[c >> 4];
}

/* ---- accessors --------------------------------------------------------- */
uint32_t eng_tok_n_vocab(const eng_tok *t) { return t->n; }
int32_t  eng_tok_bos(const eng_tok *t) { return t->bos; }
int32_t  eng_tok_eos(const eng_tok *t) { return t->eos; }
int32_t  eng_tok_eot(const eng_tok *t) { return t->eot; }
int      eng_tok_add_bos(const eng_tok *t) { return t->add_bos; }
int      eng_tok_is_spm(const eng_tok *t) { return t->spm; }
size_t   eng_tok_max_piece(const eng_tok *t) { return t->max_piece; }

int eng_tok_is_control(const eng_tok *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n)
        return 0;
    return (t->attr[id] & (TA_CONTROL | TA_UNKNOWN)) != 0;
}

const char *eng_tok_piece(const eng_tok *t, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n) {
        if (len)
            *len = 0;
        return "";
    }
    if (len)
        *len = t->plen[id];
    return t->piece + t->poff[id];
}

void eng_tok_free(eng_tok *t)
{
    if (!t)
        return;
    free(t->text);
    free(t->toff);
    free(t->tlen);
    free(t->piece);
    free(t->poff);
    free(t->plen);
    free(t->score);
    free(t->attr);
    free(t->hash);
    free(t->mkey);
    free(t->mrank);
    free(t->mres);
    free(t->special);
    eng_pretok_free(t->pre);
    free(t);
}

/* ---- how many ids a text can be ----------------------------------------- */
/* The fewest: no token stands for more than max_text bytes of input (a
 * SentencePiece text only grows when spaces become U+2581; a byte-level
 * one shrinks at most 4:1, where an overlong UTF-8 form is re-encoded
 * shortest).  0 when some byte has no token, which such a text then loses. */
size_t eng_tok_count_min(const eng_tok *t, size_t len)
{
    if (!t || !len || !t->all_bytes)
        return 0;
    size_t cover = t->max_text ? t->max_text : 1;
    if (!t->spm)
        cover = cover > SIZE_MAX / 4 ? SIZE_MAX : cover * 4;
    return len / cover + (len % cover != 0);
}

/* The most: SentencePiece gives at most one id per escaped byte (a space
 * is 3), plus a 3-byte prefix space per fragment, and a special token
 * covers at least one byte: 4 len + 5 with BOS and EOS.  Byte-level BPE
 * gives at most 2 ids per byte of the sanitised text (a symbol no token
 * covers falls back to the UTF-8 bytes of its code point), which is at
 * most 3 bytes (U+FFFD) per input byte: 6 len + 2. */
size_t eng_tok_count_max(const eng_tok *t, size_t len)
{
    size_t k = t && t->spm ? 4 : 6, c = t && t->spm ? 5 : 2;
    if (len > (SIZE_MAX - c) / k)
        return SIZE_MAX;
    return k * len + c;
}
