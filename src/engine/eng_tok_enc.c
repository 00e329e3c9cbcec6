/*
 * eng_tok_enc.c — encoding: text -> token ids.
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
 * Encoding uses a binary heap of candidate pairs per run, so a text of a
 * few KB costs microseconds to a millisecond, not seconds.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_tok_impl.h"

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

/* ---- SentencePiece ----------------------------------------------------- */
static void spm_try_pair(const eng_tok *t, work *w, const char *text,
                         int32_t l, int32_t r)
{
    cand c;
    int32_t id;
    if (l < 0 || r < 0)
        return;
    id = eng_tok_find(t, text + w->s[l].off, w->s[l].n + w->s[r].n);
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
        size_t l = eng_tok_lead_len((unsigned char)text[off]);
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
        int32_t id = s->id >= 0 ? s->id : eng_tok_find(t, text + s->off, s->n);
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
    rank = eng_tok_merge_find(t, w->s[l].id, w->s[r].id, &res);
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
        id = eng_tok_find(t, w->buf, bl);
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
                int32_t id = eng_tok_find(t, cp + q, 1);
                if (id >= 0)
                    ivec_push(out, id);
            }
        }
    }
    return 0;
}

/* The words of one raw fragment, merged; stops once out passes max ids
 * (max 0: no limit). */
static int bpe_run(const eng_tok *t, work *w, const char *raw, size_t rlen,
                   size_t max, ivec *out, char *err, size_t errlen)
{
    char *owned = NULL;
    size_t len, *ends = NULL, nw = 0, start = 0;
    const char *text = eng_pretok_sanitize(raw, rlen, &len, &owned);
    int rc;
    if (!text)
        return ENG_ENOMEM;
    rc = eng_pretok_split(t->pre, text, len, &ends, &nw, err, errlen);
    for (size_t i = 0; rc == 0 && i < nw && !(max && out->n > max); i++) {
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
/* SentencePiece: every fragment (spaces escaped as U+2581, the optional
 * prefix space at the start and after a special token) merged; stops
 * once out passes max ids (0: no limit). */
static int spm_frags(const eng_tok *t, work *w, const char *text, const fvec *fr,
                     size_t max, ivec *out)
{
    int prev_special = 1;  /* the text start counts as after a special */
    char *esc = NULL;      /* the escaped run */
    size_t ecap = 0;
    int rc = ENG_OK;
    for (size_t f = 0; f < fr->n && rc == 0 && !(max && out->n > max); f++) {
        const frag *g = &fr->v[f];
        size_t el = 0;
        if (g->tok >= 0) {
            ivec_push(out, g->tok);
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
        if (spm_run(t, w, esc, el, out) < 0)
            rc = ENG_ENOMEM;
        prev_special = 0;
    }
    free(esc);
    return rc;
}

/* text -> ids in out (add_special: BOS and EOS as the vocabulary asks).
 * max > 0: ENG_ECTX as soon as out holds more than max ids (or when even
 * the fewest ids the text can be are more), out->n then the count known. */
static int encode(const eng_tok *t, const char *text, size_t len, int add_special,
                  int parse_special, size_t max, ivec *out, char *err, size_t errlen)
{
    fvec fr = {0};
    work w = {0};
    int rc = ENG_OK;
    size_t lo = eng_tok_count_min(t, len);
    if (max && lo > max) {
        out->n = lo;
        snprintf(err, errlen, "the text is at least %zu tokens, more than %zu", lo, max);
        return ENG_ECTX;
    }
    if (len > 0 && partition(t, text, len, parse_special, &fr) < 0) {
        rc = ENG_ENOMEM;
        goto out;
    }
    if (add_special && t->add_bos && t->bos >= 0)
        ivec_push(out, t->bos);
    if (t->spm)
        rc = spm_frags(t, &w, text, &fr, max, out);
    else
        for (size_t f = 0; f < fr.n && rc == 0 && !(max && out->n > max); f++) {
            const frag *g = &fr.v[f];
            if (g->tok >= 0)
                ivec_push(out, g->tok);
            else
                rc = bpe_run(t, &w, text + g->off, g->len, max, out, err, errlen);
        }
    if (add_special && t->add_eos && t->eos >= 0)
        ivec_push(out, t->eos);
    if (rc == 0 && out->oom)
        rc = ENG_ENOMEM;
    if (rc == 0 && max && out->n > max) {
        snprintf(err, errlen, "the text is more than %zu tokens", max);
        rc = ENG_ECTX;
    }
out:
    if (rc == ENG_ENOMEM)
        snprintf(err, errlen, "tokenizer: out of memory");
    free(fr.v);
    free(w.s);
    free(w.h.v);
    free(w.buf);
    return rc;
}

int eng_tok_encode(const eng_tok *t, const char *text, size_t len,
                   int add_special, int parse_special, int32_t *ids,
                   size_t cap, size_t *n_out)
{
    ivec out = {0};
    char err[256];
    if (!t || (!text && len) || (!ids && cap) || !n_out)
        return ENG_EARG;
    *n_out = 0;
    int rc = encode(t, text, len, add_special, parse_special, 0, &out, err, sizeof err);
    if (rc == 0) {
        if (out.n > 0 && cap > 0)
            memcpy(ids, out.v, (out.n < cap ? out.n : cap) * sizeof *ids);
        *n_out = out.n;
    }
    free(out.v);
    return rc;
}

int eng_tok_encode_alloc(const eng_tok *t, const char *text, size_t len,
                         int add_special, int parse_special, size_t max,
                         size_t extra, int32_t **ids, size_t *n, char *err,
                         size_t errlen)
{
    ivec out = {0};
    if (!ids || !n || (!text && len) || !t) {
        snprintf(err, errlen, "eng_tok_encode_alloc: no text or no vocabulary");
        return ENG_EARG;
    }
    *ids = NULL;
    *n = 0;
    int rc = encode(t, text, len, add_special, parse_special, max, &out, err, errlen);
    if (rc == 0 || rc == ENG_ECTX)
        *n = out.n;
    if (rc == 0) {
        /* the real count, plus what the caller appends */
        size_t cap = out.n + extra;
        int32_t *v = cap >= out.n ? realloc(out.v, (cap ? cap : 1) * sizeof *v) : NULL;
        if (!v) {
            snprintf(err, errlen, "tokenizer: out of memory");
            free(out.v);
            return ENG_ENOMEM;
        }
        *ids = v;
        return ENG_OK;
    }
    free(out.v);
    return rc;
}
