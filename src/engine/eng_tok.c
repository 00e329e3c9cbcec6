/*
 * eng_tok.c — the tokenizer: vocabulary, encoding and streaming decoding.
 *
 * Two kinds of vocabulary, both described by GGUF keys in an fmt_kv:
 *
 *   "llama"  SentencePiece.  Spaces are written U+2581 '▁'; text is split
 *            into UTF-8 characters which are merged pairwise, best token
 *            score first (llama.cpp's llm_tokenizer_spm); characters no
 *            token covers fall back to byte tokens "<0xNN>".
 *   "gpt2"   byte-level BPE.  Text is cut into words by the regex
 *            pre-tokenizer (eng_tok_pre.c), every byte of a word is written
 *            as one printable code point (GPT-2's bytes_to_unicode) and
 *            adjacent symbols are merged by merge rank, lowest first.
 *
 * Before either runs, the text is partitioned on special-token strings
 * exactly as llama.cpp's tokenizer_st_partition does: special tokens are
 * taken longest first, and each splits every remaining text fragment at
 * each of its occurrences.  User-defined tokens always partition; control
 * and unknown tokens only when parse_special is set.
 *
 * The vocabulary (struct eng_tok)
 *   text/toff/tlen  every token's text, copied (the kv may point into a
 *                   mapping that goes away), NUL-terminated, n entries
 *   piece/poff/plen every token's bytes as eng_tok_piece returns them,
 *                   computed once at load
 *   score[n]        SentencePiece scores (float; 0 when absent)
 *   attr[n]         TA_* flags from tokenizer.ggml.token_type, plus the
 *                   promotions llama.cpp applies by token text (end-of-
 *                   generation and FIM tokens become control tokens)
 *   hash            open addressing, text -> id (slot holds id + 1)
 *   mkey/mrank/mres merges, open addressing on (left id << 32 | right id)
 *                   -> rank and the id of the merged token (-1 if absent)
 *   special         ids that partition text, longest text first
 *
 * Encoding uses a binary heap of candidate pairs per run, so a text of a
 * few KB costs microseconds to a millisecond, not seconds.
 */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/eng_impl.h"

/* token attributes (llama.cpp's llama_token_attr, the subset we use) */
enum {
    TA_NORMAL = 1u << 0, TA_UNKNOWN = 1u << 1, TA_CONTROL = 1u << 2,
    TA_USER = 1u << 3, TA_UNUSED = 1u << 4, TA_BYTE = 1u << 5,
    TA_LSTRIP = 1u << 6, TA_RSTRIP = 1u << 7
};

struct eng_tok {
    int       spm;            /* 1: "llama", 0: "gpt2" */
    uint32_t  n;
    char     *text;           /* n NUL-terminated texts */
    uint32_t *toff, *tlen;
    char     *piece;          /* n pieces, back to back */
    uint32_t *poff, *plen;
    float    *score;
    uint8_t  *attr;
    uint32_t *hash;           /* id + 1, 0 = empty */
    uint32_t  hmask;
    uint64_t *mkey;           /* (l << 32 | r) + 1, 0 = empty */
    uint32_t *mrank;
    int32_t  *mres;
    uint32_t  mmask;
    int32_t   bos, eos, eot, unk;
    int       add_bos, add_eos, add_space_prefix, ignore_merges;
    int32_t   byte_tok[256];  /* SPM: token for byte b (<0xNN>), -1 */
    int32_t   bl_tok[256];    /* BPE: token of byte b's code point, -1 */
    uint16_t  bl_cp[256];     /* BPE: byte -> code point */
    int16_t   cp_bl[512];     /* BPE: code point -> byte, -1 */
    int32_t  *special;
    uint32_t  n_special;
    eng_pretok *pre;
    size_t    max_piece;
};

/* ---- hashing ----------------------------------------------------------- */
static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* The id of the token whose text is s[0..n), or -1. */
static int32_t tok_find(const eng_tok *t, const char *s, size_t n)
{
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->hmask;
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
static int64_t merge_find(const eng_tok *t, int32_t l, int32_t r, int32_t *res)
{
    uint64_t key;
    uint32_t i;
    if (!t->mkey || l < 0 || r < 0)
        return -1;
    key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    i = (uint32_t)hash_u64(key) & t->mmask;
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

/* ---- growable id vector ------------------------------------------------ */
typedef struct ivec {
    int32_t *v;
    size_t   n, cap;
    int      oom;
} ivec;

static void ivec_push(ivec *o, int32_t id)
{
    if (o->oom)
        return;
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 256;
        int32_t *nv = realloc(o->v, nc * sizeof *nv);
        if (!nv) {
            o->oom = 1;
            return;
        }
        o->v = nv;
        o->cap = nc;
    }
    o->v[o->n++] = id;
}

/* ---- candidate-pair heap (shared by SPM and BPE) ----------------------- */
/* pri: larger is merged first (SPM: score; BPE: -rank); ties go to the
 * leftmost pair, as in llama.cpp's comparators. */
typedef struct cand {
    double   pri;
    int32_t  left, right;
    int32_t  id_l, id_r;  /* BPE: the symbols' ids when queued */
    int32_t  res;         /* token the merge makes */
    uint32_t size;        /* SPM: bytes the pair covers when queued */
} cand;

typedef struct heap {
    cand  *v;
    size_t n, cap;
    int    oom;
} heap;

static int cand_before(const cand *a, const cand *b)
{
    return a->pri > b->pri || (a->pri == b->pri && a->left < b->left);
}

static void heap_push(heap *h, const cand *c)
{
    size_t i;
    if (h->oom)
        return;
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        cand *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv) {
            h->oom = 1;
            return;
        }
        h->v = nv;
        h->cap = nc;
    }
    i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_before(c, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = *c;
}

static cand heap_pop(heap *h)
{
    cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, b;
        if (l >= h->n)
            break;
        b = (r < h->n && cand_before(&h->v[r], &h->v[l])) ? r : l;
        if (!cand_before(&h->v[b], &last))
            break;
        h->v[i] = h->v[b];
        i = b;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* A symbol of a run being merged: bytes [off, off + n) of the run. */
typedef struct sym {
    int32_t  prev, next;
    uint32_t off, n;
    int32_t  id;
} sym;

typedef struct work {
    sym  *s;
    size_t cap;
    heap  h;
    char *buf;     /* scratch text */
    size_t bcap;
} work;

static int work_syms(work *w, size_t n)
{
    if (n > w->cap) {
        sym *ns = realloc(w->s, n * sizeof *ns);
        if (!ns)
            return -1;
        w->s = ns;
        w->cap = n;
    }
    w->h.n = 0;
    return 0;
}

static char *work_buf(work *w, size_t n)
{
    if (n > w->bcap) {
        char *nb = realloc(w->buf, n);
        if (!nb)
            return NULL;
        w->buf = nb;
        w->bcap = n;
    }
    return w->buf;
}

/* llama.cpp's unicode_len_utf8: the length the lead byte announces. */
static size_t lead_len(unsigned char c)
{
    static const unsigned char lk[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                         1, 1, 1, 1, 2, 2, 3, 4};
    return lk[c >> 4];
}

/* ---- SentencePiece ----------------------------------------------------- */
static void spm_try_pair(const eng_tok *t, work *w, const char *text,
                         int32_t l, int32_t r)
{
    cand c;
    int32_t id;
    if (l < 0 || r < 0)
        return;
    id = tok_find(t, text + w->s[l].off, w->s[l].n + w->s[r].n);
    if (id < 0)
        return;
    c.pri = t->score[id];
    c.left = l;
    c.right = r;
    c.id_l = c.id_r = -1;
    c.res = id;
    c.size = w->s[l].n + w->s[r].n;
    heap_push(&w->h, &c);
}

/* Tokenize one run of escaped text (spaces already '▁'). */
static int spm_run(const eng_tok *t, work *w, const char *text, size_t len,
                   ivec *out)
{
    size_t off = 0, ns = 0;
    if (len == 0)
        return 0;
    if (len > UINT32_MAX / 2 || work_syms(w, len) < 0)
        return -1;
    while (off < len) {
        size_t l = lead_len((unsigned char)text[off]);
        if (l > len - off)
            l = len - off;
        w->s[ns].off = (uint32_t)off;
        w->s[ns].n = (uint32_t)l;
        w->s[ns].prev = (int32_t)ns - 1;
        off += l;
        w->s[ns].next = off == len ? -1 : (int32_t)ns + 1;
        w->s[ns].id = -2;  /* not looked up yet */
        ns++;
    }
    for (size_t i = 1; i < ns; i++)
        spm_try_pair(t, w, text, (int32_t)i - 1, (int32_t)i);
    while (w->h.n) {
        cand c = heap_pop(&w->h);
        sym *L = &w->s[c.left], *R = &w->s[c.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != c.size)
            continue;
        L->n += R->n;
        R->n = 0;
        L->id = c.res;
        L->next = R->next;
        if (R->next >= 0)
            w->s[R->next].prev = c.left;
        spm_try_pair(t, w, text, L->prev, c.left);
        spm_try_pair(t, w, text, c.left, L->next);
    }
    if (w->h.oom)
        return -1;
    for (int32_t i = 0; i != -1; i = w->s[i].next) {
        sym *s = &w->s[i];
        int32_t id = s->id >= 0 ? s->id : tok_find(t, text + s->off, s->n);
        if (id >= 0) {
            ivec_push(out, id);
            continue;
        }
        /* no token covers this character: its bytes, one token each */
        for (uint32_t j = 0; j < s->n; j++) {
            int32_t b = t->byte_tok[(unsigned char)text[s->off + j]];
            if (b < 0)
                b = t->unk;
            if (b >= 0)
                ivec_push(out, b);
        }
    }
    return 0;
}

/* ---- byte-level BPE ---------------------------------------------------- */
static void bpe_try_pair(const eng_tok *t, work *w, int32_t l, int32_t r)
{
    cand c;
    int32_t res;
    int64_t rank;
    if (l < 0 || r < 0)
        return;
    rank = merge_find(t, w->s[l].id, w->s[r].id, &res);
    if (rank < 0)
        return;
    c.pri = -(double)rank;
    c.left = l;
    c.right = r;
    c.id_l = w->s[l].id;
    c.id_r = w->s[r].id;
    c.res = res;
    c.size = 0;
    heap_push(&w->h, &c);
}

/* Write bytes word[0..n) in byte-level form into w->buf; its length. */
static size_t bpe_encode_bytes(const eng_tok *t, work *w, const char *word,
                               size_t n)
{
    char *b = work_buf(w, n * 2 + 1);
    size_t o = 0;
    if (!b)
        return (size_t)-1;
    for (size_t i = 0; i < n; i++)
        o += eng_utf8_put(t->bl_cp[(unsigned char)word[i]], b + o);
    return o;
}

/* Merge one pre-tokenized word (raw bytes). */
static int bpe_word(const eng_tok *t, work *w, const char *word, size_t n,
                    ivec *out)
{
    if (n == 0)
        return 0;
    if (t->ignore_merges) {
        size_t bl = bpe_encode_bytes(t, w, word, n);
        int32_t id;
        if (bl == (size_t)-1)
            return -1;
        id = tok_find(t, w->buf, bl);
        if (id >= 0) {
            ivec_push(out, id);
            return 0;
        }
    }
    if (n > UINT32_MAX / 2 || work_syms(w, n) < 0)
        return -1;
    /* every byte is one symbol: its byte-level code point is one char */
    for (size_t i = 0; i < n; i++) {
        w->s[i].off = (uint32_t)i;
        w->s[i].n = 1;
        w->s[i].prev = (int32_t)i - 1;
        w->s[i].next = i + 1 == n ? -1 : (int32_t)i + 1;
        w->s[i].id = t->bl_tok[(unsigned char)word[i]];
    }
    for (size_t i = 1; i < n; i++)
        bpe_try_pair(t, w, (int32_t)i - 1, (int32_t)i);
    while (w->h.n) {
        cand c = heap_pop(&w->h);
        sym *L = &w->s[c.left], *R = &w->s[c.right];
        if (L->n == 0 || R->n == 0 || L->id != c.id_l || R->id != c.id_r)
            continue;
        L->n += R->n;
        R->n = 0;
        L->id = c.res;
        L->next = R->next;
        if (R->next >= 0)
            w->s[R->next].prev = c.left;
        bpe_try_pair(t, w, L->prev, c.left);
        bpe_try_pair(t, w, c.left, L->next);
    }
    if (w->h.oom)
        return -1;
    for (int32_t i = 0; i != -1; i = w->s[i].next) {
        sym *s = &w->s[i];
        char cp[4];
        if (s->id >= 0) {
            ivec_push(out, s->id);
            continue;
        }
        /* llama.cpp's fallback: the symbol's byte-level text, each of its
         * UTF-8 bytes looked up as a one-byte token (unknown ones dropped) */
        for (uint32_t j = 0; j < s->n; j++) {
            size_t k = eng_utf8_put(t->bl_cp[(unsigned char)word[s->off + j]],
                                    cp);
            for (size_t q = 0; q < k; q++) {
                int32_t id = tok_find(t, cp + q, 1);
                if (id >= 0)
                    ivec_push(out, id);
            }
        }
    }
    return 0;
}

static int bpe_run(const eng_tok *t, work *w, const char *raw, size_t rlen,
                   ivec *out)
{
    char *owned = NULL;
    size_t len, *ends = NULL, nw = 0, start = 0;
    const char *text = eng_pretok_sanitize(raw, rlen, &len, &owned);
    int rc;
    if (!text)
        return ENG_ENOMEM;
    rc = eng_pretok_split(t->pre, text, len, &ends, &nw);
    for (size_t i = 0; rc == 0 && i < nw; i++) {
        if (bpe_word(t, w, text + start, ends[i] - start, out) < 0)
            rc = ENG_ENOMEM;
        start = ends[i];
    }
    free(ends);
    free(owned);
    return rc;
}

/* ---- special-token partition ------------------------------------------- */
typedef struct frag {
    size_t  off, len;
    int32_t tok;       /* -1: raw text */
} frag;

typedef struct fvec {
    frag  *v;
    size_t n, cap;
} fvec;

static int fvec_push(fvec *f, size_t off, size_t len, int32_t tok)
{
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        frag *nv = realloc(f->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        f->v = nv;
        f->cap = nc;
    }
    f->v[f->n].off = off;
    f->v[f->n].len = len;
    f->v[f->n].tok = tok;
    f->n++;
    return 0;
}

static int is_c_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Split *fr on every special token that applies, longest first. */
static int partition(const eng_tok *t, const char *text, size_t len,
                     int parse_special, fvec *fr)
{
    fvec nx = {0};
    uint8_t *pairs = NULL;   /* bit (a << 8 | b): bytes a, b adjacent */
    uint8_t single[32] = {0};
    int rc = -1;
    if (fvec_push(fr, 0, len, -1) < 0)
        return -1;
    if (t->n_special == 0)
        return 0;
    pairs = calloc(8192, 1);
    if (!pairs)
        return -1;
    for (size_t i = 0; i < len; i++) {
        unsigned a = (unsigned char)text[i];
        single[a >> 3] |= (uint8_t)(1u << (a & 7));
        if (i + 1 < len) {
            unsigned k = a << 8 | (unsigned char)text[i + 1];
            pairs[k >> 3] |= (uint8_t)(1u << (k & 7));
        }
    }
    for (uint32_t si = 0; si < t->n_special; si++) {
        int32_t id = t->special[si];
        uint8_t at = t->attr[id];
        const char *tt = t->text + t->toff[id];
        size_t tl = t->tlen[id];
        int any = 0;
        if (!parse_special && (at & (TA_CONTROL | TA_UNKNOWN)))
            continue;
        if (tl > len)
            continue;
        /* cheap rejection before any search */
        {
            unsigned a = (unsigned char)tt[0];
            if (!(single[a >> 3] & (1u << (a & 7))))
                continue;
            if (tl > 1) {
                unsigned k = a << 8 | (unsigned char)tt[1];
                if (!(pairs[k >> 3] & (1u << (k & 7))))
                    continue;
            }
        }
        nx.n = 0;
        for (size_t f = 0; f < fr->n; f++) {
            frag cur = fr->v[f];
            if (cur.tok >= 0) {
                if (fvec_push(&nx, cur.off, cur.len, cur.tok) < 0)
                    goto out;
                continue;
            }
            while (cur.len > 0) {
                const char *m = memmem(text + cur.off, cur.len, tt, tl);
                size_t mo, ll, ro, rl;
                if (!m) {
                    if (fvec_push(&nx, cur.off, cur.len, -1) < 0)
                        goto out;
                    break;
                }
                any = 1;
                mo = (size_t)(m - text);
                ll = mo - cur.off;
                if (at & TA_LSTRIP)
                    while (ll > 0 &&
                           is_c_space((unsigned char)text[cur.off + ll - 1]))
                        ll--;
                if (ll > 0 && fvec_push(&nx, cur.off, ll, -1) < 0)
                    goto out;
                if (fvec_push(&nx, mo, tl, id) < 0)
                    goto out;
                ro = mo + tl;
                rl = cur.off + cur.len - ro;
                if (at & TA_RSTRIP)
                    while (rl > 0 && is_c_space((unsigned char)text[ro])) {
                        ro++;
                        rl--;
                    }
                cur.off = ro;
                cur.len = rl;
            }
        }
        if (any) {
            fvec tmp = *fr;
            *fr = nx;
            nx = tmp;
        }
    }
    rc = 0;
out:
    free(nx.v);
    free(pairs);
    return rc;
}

/* ---- encode ------------------------------------------------------------ */
int eng_tok_encode(const eng_tok *t, const char *text, size_t len,
                   int add_special, int parse_special, int32_t *ids,
                   size_t cap, size_t *n_out)
{
    ivec out = {0};
    fvec fr = {0};
    work w = {0};
    int rc = ENG_OK;
    if (!t || (!text && len) || (!ids && cap) || !n_out)
        return ENG_EARG;
    *n_out = 0;
    if (len > 0 && partition(t, text, len, parse_special, &fr) < 0) {
        rc = ENG_ENOMEM;
        goto out;
    }
    if (add_special && t->add_bos && t->bos >= 0)
        ivec_push(&out, t->bos);
    if (t->spm) {
        int prev_special = 1;  /* the text start counts as after a special */
        char *esc = NULL;      /* the escaped run */
        size_t ecap = 0;
        for (size_t f = 0; f < fr.n && rc == 0; f++) {
            const frag *g = &fr.v[f];
            size_t el = 0;
            if (g->tok >= 0) {
                ivec_push(&out, g->tok);
                prev_special = 1;
                continue;
            }
            if (g->len * 3 + 3 > ecap) {
                char *ne = realloc(esc, g->len * 3 + 3);
                if (!ne) {
                    rc = ENG_ENOMEM;
                    break;
                }
                esc = ne;
                ecap = g->len * 3 + 3;
            }
            /* optional leading space, then ' ' -> U+2581 */
            if (t->add_space_prefix && prev_special) {
                memcpy(esc, "\xe2\x96\x81", 3);
                el = 3;
            }
            for (size_t i = 0; i < g->len; i++) {
                char c = text[g->off + i];
                if (c == ' ') {
                    memcpy(esc + el, "\xe2\x96\x81", 3);
                    el += 3;
                } else {
                    esc[el++] = c;
                }
            }
            if (spm_run(t, &w, esc, el, &out) < 0)
                rc = ENG_ENOMEM;
            prev_special = 0;
        }
        free(esc);
    } else {
        for (size_t f = 0; f < fr.n && rc == 0; f++) {
            const frag *g = &fr.v[f];
            if (g->tok >= 0)
                ivec_push(&out, g->tok);
            else
                rc = bpe_run(t, &w, text + g->off, g->len, &out);
        }
    }
    if (add_special && t->add_eos && t->eos >= 0)
        ivec_push(&out, t->eos);
    if (rc == 0 && out.oom)
        rc = ENG_ENOMEM;
    if (rc == 0) {
        if (out.n > 0 && cap > 0)
            memcpy(ids, out.v, (out.n < cap ? out.n : cap) * sizeof *ids);
        *n_out = out.n;
    }
out:
    free(out.v);
    free(fr.v);
    free(w.s);
    free(w.h.v);
    free(w.buf);
    return rc;
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

/* ======================================================================= */
/* Loading                                                                  */
/* ======================================================================= */
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

static int streq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes take code points 256.. in byte order. */
static void byte_level_tables(eng_tok *t)
{
    unsigned next = 256;
    for (unsigned i = 0; i < 512; i++)
        t->cp_bl[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
                   (b >= 0xAE && b <= 0xFF);
        t->bl_cp[b] = (uint16_t)(keep ? b : next++);
        t->cp_bl[t->bl_cp[b]] = (int16_t)b;
    }
}

/* Token texts llama.cpp recognises as control tokens whatever their type
 * (end of turn, end of generation, fill-in-the-middle). */
static const char *const eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>", NULL
};
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
    "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "[e~[", NULL
};
/* one list per FIM role; the first token found of each is promoted */
static const char *const fim_texts[][9] = {
    { "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
      "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
      "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL },
    { "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
      "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
      "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL },
    { "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
      "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
      "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL },
    { "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL },
    { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
      NULL },
    { "<|file_sep|>", NULL },
};
static const char *const fim_keys[] = {
    "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
    "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
    "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id",
};

/* The first token (by list order) whose text is in list, or -1. */
static int32_t find_listed(const eng_tok *t, const char *const *list)
{
    for (size_t i = 0; list[i]; i++) {
        int32_t id = tok_find(t, list[i], strlen(list[i]));
        if (id >= 0)
            return id;
    }
    return -1;
}

/* A special-token id from key (absent or out of range: dflt). */
static int32_t key_id(const fmt_kv *kv, const char *key, int32_t dflt,
                      uint32_t n)
{
    uint32_t v;
    if (dflt >= 0 && (uint32_t)dflt >= n)
        dflt = -1;
    if (fmt_kv_get_u32(kv, key, &v) == 0 && v < n)
        return (int32_t)v;
    return dflt;
}

static int key_bool(const fmt_kv *kv, const char *key, int dflt)
{
    int v;
    return fmt_kv_get_bool(kv, key, &v) == 0 ? (v != 0) : dflt;
}

static int special_cmp_len(const void *a, const void *b, void *ctx)
{
    const eng_tok *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->tlen[x] != t->tlen[y])
        return t->tlen[x] > t->tlen[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Parse "<0xNN>"; the byte or -1. */
static int parse_byte_token(const char *s, size_t n)
{
    unsigned v = 0;
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else
            return -1;
    }
    return (int)v;
}

/* Write token id's piece (see eng_tok_piece) into out (room for 3x the
 * text); its length. */
static size_t make_piece(const eng_tok *t, uint32_t id, char *out)
{
    const char *s = t->text + t->toff[id];
    size_t n = t->tlen[id], o = 0;
    uint8_t a = t->attr[id];
    if (a & (TA_UNKNOWN | TA_CONTROL | TA_USER)) {
        memcpy(out, s, n);
        return n;
    }
    if (a & TA_NORMAL) {
        if (t->spm) {
            for (size_t i = 0; i < n; i++) {
                if (i + 2 < n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    out[o++] = ' ';
                    i += 2;
                } else {
                    out[o++] = s[i];
                }
            }
            return o;
        }
        /* byte-level: each code point stands for one byte; code points
         * outside the map are copied as they are */
        for (size_t i = 0; i < n;) {
            size_t l = lead_len((unsigned char)s[i]);
            uint32_t cp = 0;
            if (l > n - i)
                l = n - i;
            if (l == 1)
                cp = (unsigned char)s[i];
            else if (l == 2)
                cp = ((uint32_t)(s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
            else
                cp = 0xFFFFFFFFu;
            if (cp < 512 && t->cp_bl[cp] >= 0 &&
                (l == 2 || cp < 0x80)) {
                out[o++] = (char)t->cp_bl[cp];
            } else {
                memcpy(out + o, s + i, l);
                o += l;
            }
            i += l;
        }
        return o;
    }
    if (a & TA_BYTE) {
        int b = parse_byte_token(s, n);
        if (b >= 0) {
            out[0] = (char)b;
            return 1;
        }
        memcpy(out, s, n);
        return n;
    }
    return 0;  /* unused / undefined: no text, as in llama.cpp */
}

static int load_fail(eng_tok *t, int rc)
{
    eng_tok_free(t);
    return rc;
}

int eng_tok_load(eng_tok **out, const fmt_kv *kv, char *err, size_t errlen)
{
    const char *model, *pre = NULL;
    size_t mlen, plen = 0, total = 0;
    uint64_t n64;
    int arr = 0, ty;
    eng_tok *t;
    char tmp[8];
    if (!out || !kv) {
        snprintf(err, errlen, "eng_tok_load: no vocabulary");
        return ENG_EARG;
    }
    *out = NULL;
    model = fmt_kv_get_str(kv, "tokenizer.ggml.model", &mlen);
    if (!model) {
        snprintf(err, errlen, "tokenizer: no tokenizer.ggml.model key");
        return ENG_EFORMAT;
    }
    if (!streq(model, mlen, "llama") && !streq(model, mlen, "gpt2")) {
        snprintf(err, errlen, "tokenizer: unsupported model '%.*s'",
                 (int)(mlen > 32 ? 32 : mlen), model);
        return ENG_EUNSUP;
    }
    ty = fmt_kv_type_of(kv, "tokenizer.ggml.tokens", &arr);
    n64 = fmt_kv_arr_len(kv, "tokenizer.ggml.tokens");
    if (ty != FMT_KV_STR || !arr || n64 == 0) {
        snprintf(err, errlen,
                 "tokenizer: tokenizer.ggml.tokens missing or not strings");
        return ENG_EFORMAT;
    }
    if (n64 > (1u << 26)) {
        snprintf(err, errlen, "tokenizer: %llu tokens is too many",
                 (unsigned long long)n64);
        return ENG_EFORMAT;
    }
    t = calloc(1, sizeof *t);
    if (!t)
        goto nomem;
    t->spm = streq(model, mlen, "llama");
    t->n = (uint32_t)n64;

    /* ---- texts ---- */
    for (uint32_t i = 0; i < t->n; i++) {
        size_t l;
        if (!fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", i, &l) ||
            l > (1u << 20)) {
            snprintf(err, errlen, "tokenizer: token %u is unreadable", i);
            return load_fail(t, ENG_EFORMAT);
        }
        total += l + 1;
    }
    if (total > UINT32_MAX / 3) {
        snprintf(err, errlen, "tokenizer: token texts too large");
        return load_fail(t, ENG_EFORMAT);
    }
    t->text = malloc(total);
    t->toff = malloc(t->n * sizeof *t->toff);
    t->tlen = malloc(t->n * sizeof *t->tlen);
    t->score = calloc(t->n, sizeof *t->score);
    t->attr = malloc(t->n);
    if (!t->text || !t->toff || !t->tlen || !t->score || !t->attr)
        goto nomem_t;
    total = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        size_t l;
        const char *s = fmt_kv_arr_str(kv, "tokenizer.ggml.tokens", i, &l);
        memcpy(t->text + total, s, l);
        t->text[total + l] = 0;
        t->toff[i] = (uint32_t)total;
        t->tlen[i] = (uint32_t)l;
        total += l + 1;
        t->attr[i] = TA_NORMAL;
    }

    /* ---- scores and types ---- */
    if (fmt_kv_has(kv, "tokenizer.ggml.scores")) {
        if (fmt_kv_arr_len(kv, "tokenizer.ggml.scores") < t->n) {
            snprintf(err, errlen, "tokenizer: fewer scores than tokens");
            return load_fail(t, ENG_EFORMAT);
        }
        for (uint32_t i = 0; i < t->n; i++)
            if (fmt_kv_arr_f32(kv, "tokenizer.ggml.scores", i, &t->score[i])) {
                snprintf(err, errlen, "tokenizer: tokenizer.ggml.scores "
                         "is not numeric");
                return load_fail(t, ENG_EFORMAT);
            }
    }
    if (fmt_kv_has(kv, "tokenizer.ggml.token_type")) {
        if (fmt_kv_arr_len(kv, "tokenizer.ggml.token_type") < t->n) {
            snprintf(err, errlen, "tokenizer: fewer token types than tokens");
            return load_fail(t, ENG_EFORMAT);
        }
        for (uint32_t i = 0; i < t->n; i++) {
            int32_t v;
            static const uint8_t map[7] = {0, TA_NORMAL, TA_UNKNOWN,
                                           TA_CONTROL, TA_USER, TA_UNUSED,
                                           TA_BYTE};
            if (fmt_kv_arr_i32(kv, "tokenizer.ggml.token_type", i, &v)) {
                snprintf(err, errlen, "tokenizer: tokenizer.ggml.token_type "
                         "is not integer");
                return load_fail(t, ENG_EFORMAT);
            }
            t->attr[i] = (v >= 0 && v <= 6) ? map[v] : 0;
        }
    }

    /* ---- text -> id ---- */
    {
        uint32_t sz = 16;
        while (sz < t->n * 2u)
            sz *= 2;
        t->hash = calloc(sz, sizeof *t->hash);
        if (!t->hash)
            goto nomem_t;
        t->hmask = sz - 1;
        for (uint32_t i = 0; i < t->n; i++) {
            uint32_t h;
            if (t->tlen[i] == 0)
                continue; /* an empty token can never match text */
            if (tok_find(t, t->text + t->toff[i], t->tlen[i]) >= 0)
                continue; /* duplicate text: the lowest id wins */
            h = (uint32_t)hash_bytes(t->text + t->toff[i], t->tlen[i]) &
                t->hmask;
            while (t->hash[h])
                h = (h + 1) & t->hmask;
            t->hash[h] = i + 1;
        }
    }

    /* ---- special ids and flags ---- */
    t->bos = key_id(kv, "tokenizer.ggml.bos_token_id", t->spm ? 1 : -1, t->n);
    t->eos = key_id(kv, "tokenizer.ggml.eos_token_id", t->spm ? 2 : -1, t->n);
    t->unk = key_id(kv, "tokenizer.ggml.unknown_token_id", t->spm ? 0 : -1,
                    t->n);
    t->add_space_prefix = key_bool(kv, "tokenizer.ggml.add_space_prefix",
                                   t->spm);
    if (!t->spm) {
        const char *const *cre = NULL;
        const char **res = NULL;
        size_t *rel = NULL;
        uint64_t nre = fmt_kv_arr_len(kv, "tokenizer.cflow.pre_regex");
        int rc;
        pre = fmt_kv_get_str(kv, "tokenizer.ggml.pre", &plen);
        if (nre > 0) {
            if (nre > 8) {
                snprintf(err, errlen, "tokenizer: too many pre_regex");
                return load_fail(t, ENG_EUNSUP);
            }
            res = calloc(nre, sizeof *res);
            rel = calloc(nre, sizeof *rel);
            if (!res || !rel) {
                free(res);
                free(rel);
                goto nomem_t;
            }
            for (uint64_t i = 0; i < nre; i++)
                res[i] = fmt_kv_arr_str(kv, "tokenizer.cflow.pre_regex", i,
                                        &rel[i]);
            cre = res;
        }
        rc = eng_pretok_new(&t->pre, pre, plen, cre, rel, nre, err, errlen);
        free(res);
        free(rel);
        if (rc < 0)
            return load_fail(t, rc);
        t->ignore_merges =
            key_bool(kv, "tokenizer.cflow.ignore_merges",
                     (eng_pretok_flags(t->pre) & ENG_PRE_IGNORE_MERGES) != 0);
    }
    t->add_bos = key_bool(kv, "tokenizer.ggml.add_bos_token",
                          t->spm || (t->pre && (eng_pretok_flags(t->pre) &
                                                ENG_PRE_ADD_BOS)));
    t->add_eos = key_bool(kv, "tokenizer.ggml.add_eos_token", 0);
    if (t->bos < 0)
        t->add_bos = 0;
    if (t->eos < 0)
        t->add_eos = 0;

    /* ---- control tokens by text (llama.cpp's workarounds) ---- */
    t->eot = key_id(kv, "tokenizer.ggml.eot_token_id", -1, t->n);
    if (t->eot < 0) {
        t->eot = find_listed(t, eot_texts);
        if (t->eot >= 0)
            t->attr[t->eot] |= TA_CONTROL;
    }
    for (size_t f = 0; f < sizeof fim_keys / sizeof *fim_keys; f++)
        if (key_id(kv, fim_keys[f], -1, t->n) < 0) {
            int32_t id = find_listed(t, fim_texts[f]);
            if (id >= 0)
                t->attr[id] |= TA_CONTROL;
        }
    for (size_t i = 0; eog_texts[i]; i++) {
        int32_t id = tok_find(t, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0)
            t->attr[id] |= TA_CONTROL;
    }

    /* ---- BPE merges and the byte-level map ---- */
    if (!t->spm) {
        uint64_t nm = fmt_kv_arr_len(kv, "tokenizer.ggml.merges");
        uint32_t sz = 16;
        char *cat = NULL;
        size_t catcap = 0;
        if (nm == 0) {
            snprintf(err, errlen, "tokenizer: no tokenizer.ggml.merges");
            return load_fail(t, ENG_EFORMAT);
        }
        if (nm > (1u << 26)) {
            snprintf(err, errlen, "tokenizer: too many merges");
            return load_fail(t, ENG_EFORMAT);
        }
        while (sz < nm * 2)
            sz *= 2;
        t->mkey = calloc(sz, sizeof *t->mkey);
        t->mrank = malloc(sz * sizeof *t->mrank);
        t->mres = malloc(sz * sizeof *t->mres);
        if (!t->mkey || !t->mrank || !t->mres)
            goto nomem_t;
        t->mmask = sz - 1;
        for (uint64_t i = 0; i < nm; i++) {
            size_t l;
            const char *m = fmt_kv_arr_str(kv, "tokenizer.ggml.merges", i, &l);
            const char *sp;
            int32_t a, b, r, dummy;
            uint64_t key;
            uint32_t h;
            if (!m || l < 3)
                continue;
            /* "left right", split at the first space after position 0 */
            sp = memchr(m + 1, ' ', l - 1);
            if (!sp)
                continue;
            a = tok_find(t, m, (size_t)(sp - m));
            b = tok_find(t, sp + 1, l - (size_t)(sp - m) - 1);
            if (a < 0 || b < 0 || merge_find(t, a, b, &dummy) >= 0)
                continue; /* a side outside the vocabulary, or a repeat */
            if (l > catcap) {
                char *nc = realloc(cat, l);
                if (!nc) {
                    free(cat);
                    goto nomem_t;
                }
                cat = nc;
                catcap = l;
            }
            memcpy(cat, m, (size_t)(sp - m));
            memcpy(cat + (sp - m), sp + 1, l - (size_t)(sp - m) - 1);
            r = tok_find(t, cat, l - 1);
            key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
            h = (uint32_t)hash_u64(key) & t->mmask;
            while (t->mkey[h])
                h = (h + 1) & t->mmask;
            t->mkey[h] = key;
            t->mrank[h] = (uint32_t)i;
            t->mres[h] = r;
        }
        free(cat);
        byte_level_tables(t);
        for (unsigned b = 0; b < 256; b++)
            t->bl_tok[b] = tok_find(t, tmp, eng_utf8_put(t->bl_cp[b], tmp));
    } else {
        for (unsigned b = 0; b < 256; b++) {
            snprintf(tmp, sizeof tmp, "<0x%02X>", b);
            t->byte_tok[b] = tok_find(t, tmp, 6);
            if (t->byte_tok[b] < 0) {
                tmp[0] = (char)b;
                t->byte_tok[b] = tok_find(t, tmp, 1);
            }
        }
    }

    /* ---- the partition list, and Phi-3's strip rules ---- */
    t->special = malloc(t->n * sizeof *t->special);
    if (!t->special)
        goto nomem_t;
    for (uint32_t i = 0; i < t->n; i++)
        if ((t->attr[i] & (TA_CONTROL | TA_USER | TA_UNKNOWN)) && t->tlen[i])
            t->special[t->n_special++] = (int32_t)i;
    qsort_r(t->special, t->n_special, sizeof *t->special, special_cmp_len, t);

    /* ---- pieces (before strip flags, which only shape partitioning) ---- */
    t->piece = malloc(total * 3 + 1);
    t->poff = malloc(t->n * sizeof *t->poff);
    t->plen = malloc(t->n * sizeof *t->plen);
    if (!t->piece || !t->poff || !t->plen)
        goto nomem_t;
    {
        size_t o = 0;
        for (uint32_t i = 0; i < t->n; i++) {
            size_t l = make_piece(t, i, t->piece + o);
            t->poff[i] = (uint32_t)o;
            t->plen[i] = (uint32_t)l;
            o += l;
            if (l > t->max_piece)
                t->max_piece = l;
        }
        {
            char *shrunk = realloc(t->piece, o ? o : 1);
            if (shrunk)
                t->piece = shrunk;
        }
    }
    {
        size_t nl;
        const char *name = fmt_kv_get_str(kv, "general.name", &nl);
        int phi3 = 0;
        for (size_t i = 0; name && i < nl && !phi3; i++)
            phi3 = (i + 5 <= nl && strncasecmp(name + i, "phi-3", 5) == 0) ||
                   (i + 4 <= nl && strncasecmp(name + i, "phi3", 4) == 0);
        if (phi3) {
            static const char *const keep[] = {"<unk>", "<s>",
                                               "<|endoftext|>"};
            int32_t id;
            for (uint32_t i = 0; i < t->n_special; i++)
                t->attr[t->special[i]] |= TA_RSTRIP;
            if ((id = tok_find(t, "</s>", 4)) >= 0)
                t->attr[id] |= TA_RSTRIP;
            for (size_t k = 0; k < 3; k++)
                if ((id = tok_find(t, keep[k], strlen(keep[k]))) >= 0)
                    t->attr[id] &= (uint8_t)~TA_RSTRIP;
        }
    }
    *out = t;
    return ENG_OK;
nomem_t:
    eng_tok_free(t);
nomem:
    snprintf(err, errlen, "tokenizer: out of memory");
    return ENG_ENOMEM;
}
