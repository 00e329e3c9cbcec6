/*
 * fmt_kv.c — a typed key/value store in GGUF v3 encoding.
 *
 * The encoding (little endian; the same bytes in GGUF headers and in the
 * .cflow metadata section):
 *
 *   key     u64 length, then that many bytes (no NUL; ASCII by convention)
 *   type    u32, enum fmt_kv_type
 *   value   U8/I8/BOOL 1 byte, U16/I16 2, U32/I32/F32 4, U64/I64/F64 8;
 *           STR: u64 length + bytes;
 *           ARR: u32 element type, u64 count, then count elements, each
 *           encoded as a value of that type (arrays of arrays are refused)
 *
 * In memory every entry keeps its value exactly in that encoding: a scalar
 * as its 1-8 bytes, a string as its bytes, an array as the bytes of its
 * elements.  Values parsed from a file point into the caller's buffer (no
 * copy of a 32 000-entry vocabulary); values given to fmt_kv_set_* are
 * copied into buffers the entry owns.  Writing is then a walk that emits the
 * key, the type and those bytes, so parse(write(kv)) == kv by construction.
 *
 * String arrays need random access (the tokenizer asks for token i), so the
 * entry also holds soff[count]: the offset of each element's length prefix
 * inside the element bytes.  Its size is bounded by the data (every string
 * element takes at least 8 bytes), so a file cannot make us allocate more
 * than it is long.
 *
 * Lookup goes through a small open-addressing hash (fmt_names, below, which
 * the rest of the module also uses for tensor names): duplicate-key checks
 * while parsing stay linear even for hostile files with millions of keys.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

/* ---- shared helpers ---------------------------------------------------- */
void fmt_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    fmt_one_line(err);
}

void fmt_one_line(char *s)
{
    for (char *c = s; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
}

const char *fmt_safe_name(char out[64], const char *s, size_t len)
{
    size_t n = len > 48 ? 48 : len, i;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (len > n) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
    return out;
}

/* FNV-1a, 64 bit: short keys, no adversary worth a keyed hash here (the
 * worst case is a slow open of a hostile file, never a wrong answer). */
uint64_t fmt_name_hash(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int names_grow(fmt_names *t)
{
    size_t cap = t->cap ? t->cap * 2 : 16;
    fmt_names nt = { 0 };
    nt.cap = cap;
    nt.name = calloc(cap, sizeof *nt.name);
    nt.len = calloc(cap, sizeof *nt.len);
    nt.val = calloc(cap, sizeof *nt.val);
    if (!nt.name || !nt.len || !nt.val) {
        fmt_names_free(&nt);
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->name[i])
            continue;
        size_t j = (size_t)fmt_name_hash(t->name[i], t->len[i]) & (cap - 1);
        while (nt.name[j])
            j = (j + 1) & (cap - 1);
        nt.name[j] = t->name[i];
        nt.len[j] = t->len[i];
        nt.val[j] = t->val[i];
    }
    nt.count = t->count;
    fmt_names_free(t);
    *t = nt;
    return 0;
}

int fmt_names_put(fmt_names *t, const char *s, size_t len, size_t val,
                  size_t *old)
{
    if ((t->count + 1) * 2 > t->cap && names_grow(t) < 0)
        return -1;
    size_t j = (size_t)fmt_name_hash(s, len) & (t->cap - 1);
    while (t->name[j]) {
        if (t->len[j] == len && memcmp(t->name[j], s, len) == 0) {
            if (old)
                *old = t->val[j];
            return 1;
        }
        j = (j + 1) & (t->cap - 1);
    }
    t->name[j] = s;
    t->len[j] = len;
    t->val[j] = val;
    t->count++;
    return 0;
}

int fmt_names_get(const fmt_names *t, const char *s, size_t len, size_t *val)
{
    if (t->cap == 0)
        return -1;
    size_t j = (size_t)fmt_name_hash(s, len) & (t->cap - 1);
    while (t->name[j]) {
        if (t->len[j] == len && memcmp(t->name[j], s, len) == 0) {
            *val = t->val[j];
            return 0;
        }
        j = (j + 1) & (t->cap - 1);
    }
    return -1;
}

void fmt_names_free(fmt_names *t)
{
    free(t->name);
    free(t->len);
    free(t->val);
    memset(t, 0, sizeof *t);
}

/* ---- the store --------------------------------------------------------- */
#define KV_MAX_KEY 65535u  /* GGUF's own limit on key length */

typedef struct kv_ent {
    const char    *key;     /* klen bytes, not NUL-terminated when parsed */
    size_t         klen;
    int            type;    /* enum fmt_kv_type */
    int            etype;   /* element type when type == FMT_KV_ARR */
    uint64_t       n;       /* element count (arrays) */
    const uint8_t *val;     /* value bytes in file encoding (see above) */
    size_t         vlen;
    uint64_t      *soff;    /* [n] string arrays: offset of element i */
    char          *own_key; /* owned copies (NULL when pointing into a file) */
    uint8_t       *own_val;
} kv_ent;

struct fmt_kv {
    kv_ent   *e;
    size_t    n, cap;
    fmt_names idx;          /* key -> position in e */
};

/* Bytes of one scalar of type t; 0 for STR/ARR/unknown. */
static size_t kv_scalar_size(int t)
{
    switch (t) {
    case FMT_KV_U8: case FMT_KV_I8: case FMT_KV_BOOL: return 1;
    case FMT_KV_U16: case FMT_KV_I16: return 2;
    case FMT_KV_U32: case FMT_KV_I32: case FMT_KV_F32: return 4;
    case FMT_KV_U64: case FMT_KV_I64: case FMT_KV_F64: return 8;
    default: return 0;
    }
}

static int kv_type_valid(uint32_t t)
{
    return t <= FMT_KV_F64;
}

fmt_kv *fmt_kv_new(void)
{
    return calloc(1, sizeof(fmt_kv));
}

static void ent_clear(kv_ent *e)
{
    free(e->soff);
    free(e->own_val);
    e->soff = NULL;
    e->own_val = NULL;
}

void fmt_kv_free(fmt_kv *kv)
{
    if (!kv)
        return;
    for (size_t i = 0; i < kv->n; i++) {
        ent_clear(&kv->e[i]);
        free(kv->e[i].own_key);
    }
    free(kv->e);
    fmt_names_free(&kv->idx);
    free(kv);
}

static int kv_reserve(fmt_kv *kv, size_t want)
{
    if (want <= kv->cap)
        return 0;
    size_t cap = kv->cap ? kv->cap : 16;
    while (cap < want)
        cap *= 2;
    kv_ent *e = realloc(kv->e, cap * sizeof *e);
    if (!e)
        return -1;
    kv->e = e;
    kv->cap = cap;
    return 0;
}

static const kv_ent *kv_find(const fmt_kv *kv, const char *key)
{
    size_t i;
    if (!kv || !key || fmt_names_get(&kv->idx, key, strlen(key), &i) < 0)
        return NULL;
    return &kv->e[i];
}

/* Build the offsets of count strings in p[0..n); returns the bytes used, or
 * (size_t)-1 when a length runs past n.  soff may be NULL (measure only). */
static size_t str_offsets(const uint8_t *p, size_t n, uint64_t count,
                          uint64_t *soff, uint64_t *bad)
{
    size_t o = 0;
    for (uint64_t i = 0; i < count; i++) {
        if (n - o < 8) {
            *bad = i;
            return (size_t)-1;
        }
        uint64_t len = kern_ld_u64(p + o);
        if (len > n - o - 8) {
            *bad = i;
            return (size_t)-1;
        }
        if (soff)
            soff[i] = o;
        o += 8 + (size_t)len;
    }
    return o;
}

/* The value of array entry e, whose header starts at p + *o (of n bytes):
 * the element type and count, then the elements, checked against the
 * bytes left (strings through str_offsets, e->soff malloc'd); *o past it.
 * FMT_OK, or a code with err naming the entry (nm) in what. */
static int parse_array(kv_ent *e, const uint8_t *p, size_t n, size_t *o, const char *what,
                       const char *nm, char *err, size_t errlen)
{
    if (n - *o < 12) {
        fmt_err(err, errlen, "%s: metadata '%s': truncated array header", what, nm);
        return FMT_EFORMAT;
    }
    uint32_t et = kern_ld_u32(p + *o);
    uint64_t cnt = kern_ld_u64(p + *o + 4);
    *o += 12;
    if (!kv_type_valid(et)) {
        fmt_err(err, errlen, "%s: metadata '%s': unknown array element type %u", what, nm,
                et);
        return FMT_EFORMAT;
    }
    if (et == FMT_KV_ARR) {
        fmt_err(err, errlen, "%s: metadata '%s': arrays of arrays are not supported", what,
                nm);
        return FMT_EUNSUP;
    }
    e->etype = (int)et;
    e->n = cnt;
    e->val = p + *o;
    if (et == FMT_KV_STR) {
        uint64_t bad = 0;
        if (cnt > (n - *o) / 8) {
            fmt_err(err, errlen, "%s: metadata '%s': %llu strings cannot fit in the "
                    "remaining %zu bytes", what, nm, (unsigned long long)cnt, n - *o);
            return FMT_EFORMAT;
        }
        e->soff = malloc((size_t)(cnt ? cnt : 1) * sizeof *e->soff);
        if (!e->soff) {
            fmt_err(err, errlen, "%s: out of memory", what);
            return FMT_ENOMEM;
        }
        size_t used1 = str_offsets(p + *o, n - *o, cnt, e->soff, &bad);
        if (used1 == (size_t)-1) {
            free(e->soff);
            e->soff = NULL;
            fmt_err(err, errlen, "%s: metadata '%s': string %llu of %llu runs past the end "
                    "of the data", what, nm, (unsigned long long)bad, (unsigned long long)cnt);
            return FMT_EFORMAT;
        }
        e->vlen = used1;
    } else {
        size_t es = kv_scalar_size((int)et);
        if (cnt > (n - *o) / es) {
            fmt_err(err, errlen, "%s: metadata '%s': array of %llu elements runs past the "
                    "end of the data", what, nm, (unsigned long long)cnt);
            return FMT_EFORMAT;
        }
        e->vlen = (size_t)cnt * es;
    }
    *o += e->vlen;
    return FMT_OK;
}

/* On failure the entries parsed before the bad one stay in kv (callers
 * free it); nothing past the failure is kept. */
int fmt_kv_parse(fmt_kv *kv, const uint8_t *p, size_t n, uint64_t count,
                 size_t *used, const char *what, char *err, size_t errlen)
{
    char nm[64];
    size_t o = 0;
    if (!what)
        what = "metadata";
    if (used)
        *used = 0;
    if (!kv || (!p && n)) {
        fmt_err(err, errlen, "%s: bad arguments to fmt_kv_parse", what);
        return FMT_EARG;
    }
    /* Smallest entry: 8 (key length) + 1 (key) + 4 (type) + 1 (value). */
    if (count > n / 14) {
        fmt_err(err, errlen,
                "%s: %llu metadata entries cannot fit in %zu bytes", what,
                (unsigned long long)count, n);
        return FMT_EFORMAT;
    }
    if (kv_reserve(kv, kv->n + (size_t)count) < 0) {
        fmt_err(err, errlen, "%s: out of memory", what);
        return FMT_ENOMEM;
    }
    for (uint64_t i = 0; i < count; i++) {
        kv_ent e;
        memset(&e, 0, sizeof e);
        if (n - o < 8) {
            fmt_err(err, errlen, "%s: metadata entry %llu: truncated key "
                    "length at offset %zu", what, (unsigned long long)i, o);
            return FMT_EFORMAT;
        }
        uint64_t klen = kern_ld_u64(p + o);
        o += 8;
        if (klen == 0 || klen > KV_MAX_KEY || klen > n - o) {
            fmt_err(err, errlen, "%s: metadata entry %llu: bad key length "
                    "%llu at offset %zu", what, (unsigned long long)i,
                    (unsigned long long)klen, o - 8);
            return FMT_EFORMAT;
        }
        e.key = (const char *)(p + o);
        e.klen = (size_t)klen;
        o += e.klen;
        fmt_safe_name(nm, e.key, e.klen);
        if (n - o < 4) {
            fmt_err(err, errlen, "%s: metadata '%s': truncated type", what,
                    nm);
            return FMT_EFORMAT;
        }
        uint32_t t = kern_ld_u32(p + o);
        o += 4;
        if (!kv_type_valid(t)) {
            fmt_err(err, errlen, "%s: metadata '%s': unknown value type %u",
                    what, nm, t);
            return FMT_EFORMAT;
        }
        e.type = (int)t;
        if (t == FMT_KV_STR) {
            if (n - o < 8 || kern_ld_u64(p + o) > n - o - 8) {
                fmt_err(err, errlen, "%s: metadata '%s': string runs past "
                        "the end of the data", what, nm);
                return FMT_EFORMAT;
            }
            e.vlen = (size_t)kern_ld_u64(p + o);
            e.val = p + o + 8;
            o += 8 + e.vlen;
        } else if (t == FMT_KV_ARR) {
            int rc = parse_array(&e, p, n, &o, what, nm, err, errlen);
            if (rc)
                return rc;
        } else {
            size_t es = kv_scalar_size((int)t);
            if (n - o < es) {
                fmt_err(err, errlen, "%s: metadata '%s': truncated value",
                        what, nm);
                return FMT_EFORMAT;
            }
            e.val = p + o;
            e.vlen = es;
            o += es;
        }
        int r = fmt_names_put(&kv->idx, e.key, e.klen, kv->n, NULL);
        if (r != 0) {
            free(e.soff);
            if (r < 0) {
                fmt_err(err, errlen, "%s: out of memory", what);
                return FMT_ENOMEM;
            }
            fmt_err(err, errlen, "%s: metadata key '%s' appears twice", what,
                    nm);
            return FMT_EFORMAT;
        }
        kv->e[kv->n++] = e;
    }
    if (used)
        *used = o;
    return FMT_OK;
}

size_t fmt_kv_count(const fmt_kv *kv)
{
    return kv ? kv->n : 0;
}

const char *fmt_kv_key(const fmt_kv *kv, size_t i, size_t *len)
{
    if (!kv || i >= kv->n)
        return NULL;
    if (len)
        *len = kv->e[i].klen;
    return kv->e[i].key;
}

int fmt_kv_has(const fmt_kv *kv, const char *key)
{
    return kv_find(kv, key) != NULL;
}

int fmt_kv_type_of(const fmt_kv *kv, const char *key, int *arr)
{
    const kv_ent *e = kv_find(kv, key);
    if (arr)
        *arr = 0;
    if (!e)
        return -1;
    if (e->type == FMT_KV_ARR && arr) {
        *arr = 1;
        return e->etype;
    }
    return e->type;
}

/* ---- getters ----------------------------------------------------------- */
/* Read an integer of type t at p; *neg and *mag hold sign and magnitude so one
 * path serves signed and unsigned targets without overflow.  -1 if t is not
 * an integer type. */
static int int_at(int t, const uint8_t *p, int *neg, uint64_t *mag)
{
    int64_t s;
    switch (t) {
    case FMT_KV_U8:  *neg = 0; *mag = p[0]; return 0;
    case FMT_KV_U16: *neg = 0; *mag = kern_ld_u16(p); return 0;
    case FMT_KV_U32: *neg = 0; *mag = kern_ld_u32(p); return 0;
    case FMT_KV_U64: *neg = 0; *mag = kern_ld_u64(p); return 0;
    case FMT_KV_I8:  s = (int8_t)p[0]; break;
    case FMT_KV_I16: s = (int16_t)kern_ld_u16(p); break;
    case FMT_KV_I32: s = (int32_t)kern_ld_u32(p); break;
    case FMT_KV_I64: s = (int64_t)kern_ld_u64(p); break;
    default: return -1;
    }
    *neg = s < 0;
    /* -(s+1)+1 avoids negating INT64_MIN */
    *mag = s < 0 ? (uint64_t)(-(s + 1)) + 1u : (uint64_t)s;
    return 0;
}

int fmt_kv_get_u32(const fmt_kv *kv, const char *key, uint32_t *out)
{
    const kv_ent *e = kv_find(kv, key);
    int neg;
    uint64_t m;
    if (!e || int_at(e->type, e->val, &neg, &m) < 0 || neg ||
        m > UINT32_MAX)
        return -1;
    *out = (uint32_t)m;
    return 0;
}

int fmt_kv_get_i64(const fmt_kv *kv, const char *key, int64_t *out)
{
    const kv_ent *e = kv_find(kv, key);
    int neg;
    uint64_t m;
    if (!e || int_at(e->type, e->val, &neg, &m) < 0)
        return -1;
    if (neg) {
        if (m > (uint64_t)INT64_MAX + 1u)
            return -1;
        *out = m == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)m;
    } else {
        if (m > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)m;
    }
    return 0;
}

static int float_at(int t, const uint8_t *p, float *out)
{
    if (t == FMT_KV_F32) {
        *out = kern_ld_f32(p);
        return 0;
    }
    if (t == FMT_KV_F64) {
        double d;
        memcpy(&d, p, sizeof d);
        *out = (float)d;
        return 0;
    }
    return -1;
}

int fmt_kv_get_f32(const fmt_kv *kv, const char *key, float *out)
{
    const kv_ent *e = kv_find(kv, key);
    return e ? float_at(e->type, e->val, out) : -1;
}

int fmt_kv_get_bool(const fmt_kv *kv, const char *key, int *out)
{
    const kv_ent *e = kv_find(kv, key);
    if (!e || e->type != FMT_KV_BOOL)
        return -1;
    *out = e->val[0] != 0;
    return 0;
}

const char *fmt_kv_get_str(const fmt_kv *kv, const char *key, size_t *len)
{
    const kv_ent *e = kv_find(kv, key);
    if (!e || e->type != FMT_KV_STR)
        return NULL;
    if (len)
        *len = e->vlen;
    /* an empty string still yields a valid non-NULL pointer */
    return e->vlen ? (const char *)e->val : "";
}

uint64_t fmt_kv_arr_len(const fmt_kv *kv, const char *key)
{
    const kv_ent *e = kv_find(kv, key);
    return (e && e->type == FMT_KV_ARR) ? e->n : 0;
}

const char *fmt_kv_arr_str(const fmt_kv *kv, const char *key, uint64_t i,
                           size_t *len)
{
    const kv_ent *e = kv_find(kv, key);
    if (!e || e->type != FMT_KV_ARR || e->etype != FMT_KV_STR || i >= e->n)
        return NULL;
    const uint8_t *p = e->val + e->soff[i];
    if (len)
        *len = (size_t)kern_ld_u64(p);
    return (const char *)(p + 8);
}

int fmt_kv_arr_f32(const fmt_kv *kv, const char *key, uint64_t i, float *out)
{
    const kv_ent *e = kv_find(kv, key);
    if (!e || e->type != FMT_KV_ARR || i >= e->n)
        return -1;
    size_t es = kv_scalar_size(e->etype);
    if (es == 0)
        return -1;
    return float_at(e->etype, e->val + (size_t)i * es, out);
}

int fmt_kv_arr_i32(const fmt_kv *kv, const char *key, uint64_t i,
                   int32_t *out)
{
    const kv_ent *e = kv_find(kv, key);
    int neg;
    uint64_t m;
    if (!e || e->type != FMT_KV_ARR || i >= e->n)
        return -1;
    size_t es = kv_scalar_size(e->etype);
    if (es == 0 || int_at(e->etype, e->val + (size_t)i * es, &neg, &m) < 0)
        return -1;
    if (neg ? m > (uint64_t)INT32_MAX + 1u : m > (uint64_t)INT32_MAX)
        return -1;
    *out = neg ? (int32_t)(-(int64_t)m) : (int32_t)m;
    return 0;
}

/* ---- setters ----------------------------------------------------------- */
/* Find or append the entry for key, with its old value released; the new
 * value is then stored by the caller.  NULL on ENOMEM. */
static kv_ent *kv_slot(fmt_kv *kv, const char *key)
{
    size_t klen = strlen(key), i;
    if (fmt_names_get(&kv->idx, key, klen, &i) == 0) {
        ent_clear(&kv->e[i]);
        kv->e[i].n = 0;
        kv->e[i].etype = 0;
        return &kv->e[i];
    }
    if (klen == 0 || klen > KV_MAX_KEY || kv_reserve(kv, kv->n + 1) < 0)
        return NULL;
    char *k = malloc(klen + 1);
    if (!k)
        return NULL;
    memcpy(k, key, klen + 1);
    if (fmt_names_put(&kv->idx, k, klen, kv->n, NULL) != 0) {
        free(k);
        return NULL;
    }
    kv_ent *e = &kv->e[kv->n++];
    memset(e, 0, sizeof *e);
    e->key = k;
    e->klen = klen;
    e->own_key = k;
    return e;
}

/* Store type t with the len bytes at v (copied; v may alias the old value
 * of this very key, so copy before releasing it). */
static int kv_set_raw(fmt_kv *kv, const char *key, int t, int et, uint64_t n,
                      const void *v, size_t len)
{
    if (!kv || !key)
        return -1;
    uint8_t *c = malloc(len ? len : 1);
    if (!c)
        return -1;
    if (len)
        memcpy(c, v, len);
    kv_ent *e = kv_slot(kv, key);
    if (!e) {
        free(c);
        return -1;
    }
    e->type = t;
    e->etype = et;
    e->n = n;
    e->own_val = c;
    e->val = c;
    e->vlen = len;
    if (t == FMT_KV_ARR && et == FMT_KV_STR) {
        uint64_t bad;
        e->soff = malloc((size_t)(n ? n : 1) * sizeof *e->soff);
        if (!e->soff) {
            /* leave a valid empty array rather than a dangling entry */
            e->n = 0;
            e->vlen = 0;
            return -1;
        }
        str_offsets(c, len, n, e->soff, &bad);
    }
    return 0;
}

int fmt_kv_set_u32(fmt_kv *kv, const char *key, uint32_t v)
{
    return kv_set_raw(kv, key, FMT_KV_U32, 0, 0, &v, 4);
}

int fmt_kv_set_i32(fmt_kv *kv, const char *key, int32_t v)
{
    return kv_set_raw(kv, key, FMT_KV_I32, 0, 0, &v, 4);
}

int fmt_kv_set_f32(fmt_kv *kv, const char *key, float v)
{
    return kv_set_raw(kv, key, FMT_KV_F32, 0, 0, &v, 4);
}

int fmt_kv_set_bool(fmt_kv *kv, const char *key, int v)
{
    uint8_t b = v != 0;
    return kv_set_raw(kv, key, FMT_KV_BOOL, 0, 0, &b, 1);
}

int fmt_kv_set_str(fmt_kv *kv, const char *key, const char *s, size_t len)
{
    if (!s && len)
        return -1;
    return kv_set_raw(kv, key, FMT_KV_STR, 0, 0, s, len);
}

int fmt_kv_set_arr_str(fmt_kv *kv, const char *key, const char *const *s,
                       const size_t *lens, uint64_t n)
{
    size_t total = 0;
    if (n > SIZE_MAX / 8)
        return -1;
    for (uint64_t i = 0; i < n; i++) {
        size_t l = lens ? lens[i] : strlen(s[i]);
        if (l > SIZE_MAX - 8 - total)
            return -1;
        total += 8 + l;
    }
    uint8_t *buf = malloc(total ? total : 1);
    if (!buf)
        return -1;
    size_t o = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = lens ? lens[i] : strlen(s[i]);
        memcpy(buf + o, &l, 8);
        if (l)
            memcpy(buf + o + 8, s[i], (size_t)l);
        o += 8 + (size_t)l;
    }
    int r = kv_set_raw(kv, key, FMT_KV_ARR, FMT_KV_STR, n, buf, total);
    free(buf);
    return r;
}

int fmt_kv_set_arr_f32(fmt_kv *kv, const char *key, const float *v,
                       uint64_t n)
{
    if (n > SIZE_MAX / 4)
        return -1;
    return kv_set_raw(kv, key, FMT_KV_ARR, FMT_KV_F32, n, v, (size_t)n * 4);
}

int fmt_kv_set_arr_i32(fmt_kv *kv, const char *key, const int32_t *v,
                       uint64_t n)
{
    if (n > SIZE_MAX / 4)
        return -1;
    return kv_set_raw(kv, key, FMT_KV_ARR, FMT_KV_I32, n, v, (size_t)n * 4);
}

int fmt_kv_copy(fmt_kv *dst, const fmt_kv *src, const char *key)
{
    const kv_ent *e = kv_find(src, key);
    if (!e || !dst)
        return -1;
    if (dst == src)
        return 0;
    return kv_set_raw(dst, key, e->type, e->etype, e->n, e->val, e->vlen);
}

size_t fmt_kv_write(const fmt_kv *kv, uint8_t *out)
{
    size_t o = 0;
    if (!kv)
        return 0;
    for (size_t i = 0; i < kv->n; i++) {
        const kv_ent *e = &kv->e[i];
        uint64_t klen = e->klen;
        uint32_t t = (uint32_t)e->type;
        if (out) {
            memcpy(out + o, &klen, 8);
            memcpy(out + o + 8, e->key, e->klen);
            memcpy(out + o + 8 + e->klen, &t, 4);
        }
        o += 8 + e->klen + 4;
        if (e->type == FMT_KV_STR) {
            uint64_t l = e->vlen;
            if (out)
                memcpy(out + o, &l, 8);
            o += 8;
        } else if (e->type == FMT_KV_ARR) {
            uint32_t et = (uint32_t)e->etype;
            uint64_t n = e->n;
            if (out) {
                memcpy(out + o, &et, 4);
                memcpy(out + o + 4, &n, 8);
            }
            o += 12;
        }
        if (out && e->vlen)
            memcpy(out + o, e->val, e->vlen);
        o += e->vlen;
    }
    return o;
}
