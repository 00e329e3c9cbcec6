/*
 * fuzz_common.c — scratch files, the archive form, the error contract and
 * the walks every fuzz target shares (see fuzz.h for the why).
 *
 * mmap emulation.  The libraries map model files read-only (fmt_map_open,
 * fmt_model_open).  A mapping is rounded up to whole pages, and the bytes
 * past the end of the file read as zeros: a parser that reads a little too
 * far would never fault, and AddressSanitizer does not watch mappings.  The
 * fuzz and replay programs are linked with -Wl,--wrap=mmap (and munmap,
 * madvise), which sends the libraries' calls here: a read-only private file
 * mapping becomes a page-aligned heap block holding exactly the file's
 * bytes (pread), so one byte too far is a heap-buffer-overflow.  Every other
 * mapping (anonymous memory, writable or shared maps) goes to the real
 * mmap.  Only the statically linked project libraries and this program are
 * affected; shared libraries (json-c, PCRE2, libc itself) keep the real
 * calls.
 *
 * Allocation limit.  malloc, calloc, realloc, aligned_alloc and
 * posix_memalign are wrapped the same way: a single request above
 * FUZZ_MALLOC_LIMIT_MB (512 MB, as `make fuzz` gives libFuzzer's
 * -malloc_limit_mb; the environment variable of that name overrides it)
 * is an allocation out of proportion to any input here, and aborts with
 * the size, so `make check` catches allocation bombs too: glibc would often
 * grant them lazily and the test would pass.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

/* ---- failing ------------------------------------------------------------ */
void fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    fputs("fuzz: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

/* ---- allocation limit ---------------------------------------------------- */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t al, size_t n);
int __real_posix_memalign(void **p, size_t al, size_t n);

static size_t alloc_limit(void)
{
    static size_t lim;
    if (!lim) {
        const char *e = getenv("FUZZ_MALLOC_LIMIT_MB");
        unsigned long mb = e && *e ? strtoul(e, NULL, 10) : 0;
        lim = (size_t)(mb ? mb : 512) << 20;
    }
    return lim;
}

static void alloc_check(const char *fn, size_t n)
{
    if (n > alloc_limit())
        fuzz_fail("%s(%zu): a single allocation above the %zu MB limit "
                  "(allocation out of proportion to the input)", fn, n,
                  alloc_limit() >> 20);
}

void *__wrap_malloc(size_t n);
void *__wrap_malloc(size_t n)
{
    alloc_check("malloc", n);
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t m);
void *__wrap_calloc(size_t n, size_t m)
{
    if (m && n > SIZE_MAX / m)
        fuzz_fail("calloc(%zu, %zu): the size overflows", n, m);
    alloc_check("calloc", n * m);
    return __real_calloc(n, m);
}

void *__wrap_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n)
{
    alloc_check("realloc", n);
    return __real_realloc(p, n);
}

void *__wrap_aligned_alloc(size_t al, size_t n);
void *__wrap_aligned_alloc(size_t al, size_t n)
{
    alloc_check("aligned_alloc", n);
    return __real_aligned_alloc(al, n);
}

int __wrap_posix_memalign(void **p, size_t al, size_t n);
int __wrap_posix_memalign(void **p, size_t al, size_t n)
{
    alloc_check("posix_memalign", n);
    return __real_posix_memalign(p, al, n);
}

/* ---- mmap emulation ------------------------------------------------------ */
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd,
                  off_t off);
int __real_munmap(void *addr, size_t len);
int __real_madvise(void *addr, size_t len, int advice);

#define MAX_MAPS 256
static struct { void *p; size_t len; } maps[MAX_MAPS];
static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;

static int map_find(const void *p)
{
    for (int i = 0; i < MAX_MAPS; i++)
        if (maps[i].p == p)
            return i;
    return -1;
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd,
                  off_t off);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd,
                  off_t off)
{
    if (fd < 0 || addr || prot != PROT_READ || (flags & MAP_ANONYMOUS) ||
        (flags & (MAP_SHARED | MAP_PRIVATE)) != MAP_PRIVATE || off < 0)
        return __real_mmap(addr, len, prot, flags, fd, off);
    if (len == 0) {
        errno = EINVAL;
        return MAP_FAILED;
    }
    void *p = NULL;
    if (posix_memalign(&p, 4096, len) != 0) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, (char *)p + got, len - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    /* past the end of the file a real mapping gives zeros (SIGBUS past
     * the last page): give zeros too, the overflow check is on len */
    memset((char *)p + got, 0, len - got);
    pthread_mutex_lock(&maps_lock);
    int i = map_find(NULL);
    if (i >= 0) {
        maps[i].p = p;
        maps[i].len = len;
    }
    pthread_mutex_unlock(&maps_lock);
    if (i < 0) {
        free(p);
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return p;
}

int __wrap_munmap(void *addr, size_t len);
int __wrap_munmap(void *addr, size_t len)
{
    pthread_mutex_lock(&maps_lock);
    int i = addr ? map_find(addr) : -1;
    if (i >= 0) {
        if (maps[i].len != len) {
            pthread_mutex_unlock(&maps_lock);
            fuzz_fail("munmap of %zu bytes of a %zu-byte file mapping", len,
                      maps[i].len);
        }
        maps[i].p = NULL;
    }
    pthread_mutex_unlock(&maps_lock);
    if (i < 0)
        return __real_munmap(addr, len);
    free(addr);
    return 0;
}

int __wrap_madvise(void *addr, size_t len, int advice);
int __wrap_madvise(void *addr, size_t len, int advice)
{
    /* the converters hand back pages anywhere inside a mapping (its pages
     * rounded up past the file's end included): MADV_DONTNEED on the heap
     * block would zero it, so advice touching one is a no-op */
    const char *a = addr, *b = a + len;
    int hit = 0;
    pthread_mutex_lock(&maps_lock);
    for (int i = 0; i < MAX_MAPS && !hit; i++) {
        const char *lo = maps[i].p;
        if (!lo)
            continue;   /* a free slot: no pointer arithmetic on NULL */
        const char *hi = lo + ((maps[i].len + 4095) & ~(size_t)4095);
        hit = a < hi && b > lo;
    }
    pthread_mutex_unlock(&maps_lock);
    if (hit)
        return 0;     /* advice about a heap block: nothing to do */
    return __real_madvise(addr, len, advice);
}

/* ---- scratch folder ------------------------------------------------------ */
static char scratch[512];

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[1024];
    if (!d)
        return;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rm_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void scratch_cleanup(void)
{
    if (scratch[0])
        rm_tree(scratch);
}

const char *fuzz_dir(void)
{
    if (scratch[0])
        return scratch;
    const char *bases[3] = { "/dev/shm", getenv("TMPDIR"), "/tmp" };
    for (int i = 0; i < 3; i++) {
        struct stat st;
        if (!bases[i] || stat(bases[i], &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        snprintf(scratch, sizeof scratch, "%s/cflow-fuzz-XXXXXX", bases[i]);
        if (mkdtemp(scratch)) {
            atexit(scratch_cleanup);
            return scratch;
        }
    }
    fuzz_fail("cannot make a scratch folder: %s", strerror(errno));
}

const char *fuzz_path(const char *name)
{
    static struct { char *name, *path; } memo[64];
    static int n;
    for (int i = 0; i < n; i++)
        if (!strcmp(memo[i].name, name))
            return memo[i].path;
    if (n == 64)
        fuzz_fail("fuzz_path: too many names");
    const char *d = fuzz_dir();
    size_t len = strlen(d) + strlen(name) + 2;
    char *p = malloc(len);
    char *nm = strdup(name);
    if (!p || !nm)
        fuzz_fail("out of memory");
    snprintf(p, len, "%s/%s", d, name);
    memo[n].name = nm;
    memo[n].path = p;
    n++;
    return p;
}

void fuzz_write(const char *name, const void *buf, size_t len)
{
    const char *p = fuzz_path(name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        fuzz_fail("%s: %s", p, strerror(errno));
    size_t o = 0;
    while (o < len) {
        ssize_t w = write(fd, (const char *)buf + o, len - o);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            fuzz_fail("%s: write: %s", p, strerror(errno));
        o += (size_t)w;
    }
    close(fd);
}

/* ---- the archive form ---------------------------------------------------- */
static const char *const archive_names[] = {
    "config.json", "model.safetensors", "model.safetensors.index.json",
    "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
    "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
    "chat_template.jinja", "tokenizer.model", "model.bin", "tokenizer.bin",
};
#define N_ARCHIVE (sizeof archive_names / sizeof *archive_names)
static int unpacked[N_ARCHIVE];

static const uint8_t *find_mark(const uint8_t *p, size_t n)
{
    static const char mark[] = "\n@@file ";
    const size_t ml = sizeof mark - 1;
    while (n >= ml) {
        const uint8_t *q = memchr(p, '\n', n - ml + 1);
        if (!q)
            return NULL;
        if (memcmp(q, mark, ml) == 0)
            return q;
        n -= (size_t)(q + 1 - p);
        p = q + 1;
    }
    return NULL;
}

int fuzz_unpack(const uint8_t *data, size_t size)
{
    static const char head[] = "@@file ";
    const size_t hl = sizeof head - 1;
    for (size_t i = 0; i < N_ARCHIVE; i++) {
        unlink(fuzz_path(archive_names[i]));
        unpacked[i] = 0;
    }
    if (size < hl || memcmp(data, head, hl) != 0)
        return -1;
    const uint8_t *p = data, *end = data + size;
    int n = 0;
    while (p < end) {
        /* p is at "@@file NAME\n" */
        const uint8_t *name = p + hl;
        const uint8_t *nl = memchr(name, '\n', (size_t)(end - name));
        if (!nl)
            break;
        const uint8_t *body = nl + 1;
        const uint8_t *next = find_mark(nl, (size_t)(end - nl));
        const uint8_t *bend = next ? next : end;
        if (bend < body)
            bend = body;
        size_t nlen = (size_t)(nl - name);
        for (size_t i = 0; i < N_ARCHIVE; i++) {
            if (strlen(archive_names[i]) == nlen &&
                memcmp(archive_names[i], name, nlen) == 0) {
                fuzz_write(archive_names[i], body, (size_t)(bend - body));
                n += !unpacked[i];
                unpacked[i] = 1;
            }
        }
        if (!next)
            break;
        p = next + 1;
    }
    return n;
}

int fuzz_unpacked(const char *name)
{
    for (size_t i = 0; i < N_ARCHIVE; i++)
        if (!strcmp(archive_names[i], name))
            return unpacked[i];
    return 0;
}

/* ---- the error contract -------------------------------------------------- */
void fuzz_check_err(const char *what, int rc, int lo, const char *err,
                    size_t errlen)
{
    if (rc >= 0)
        return;
    if (rc < lo)
        fuzz_fail("%s: returned %d, not an error code of the module", what,
                  rc);
    if (!memchr(err, '\0', errlen))
        fuzz_fail("%s: error message not NUL-terminated", what);
    if (!err[0])
        fuzz_fail("%s: failed (%d) without an error message", what, rc);
    if (strchr(err, '\n') || strchr(err, '\r'))
        fuzz_fail("%s: error message is more than one line: %s", what, err);
}

/* ---- shared files -------------------------------------------------------- */
#ifndef FUZZ_SHARED
#define FUZZ_SHARED "../shared"
#endif

const char *fuzz_shared(const char *rel)
{
    static char buf[8][4096];
    static int k;
    const char *base = getenv("CFLOW_SHARED");
    if (!base || !*base)
        base = FUZZ_SHARED;
    char *b = buf[k++ & 7];
    snprintf(b, 4096, "%s/%s", base, rel);
    return b;
}

/* ---- UTF-8 --------------------------------------------------------------- */
int fuzz_utf8_valid(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        unsigned need;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            need = 1; cp = c & 0x1F; min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            need = 2; cp = c & 0x0F; min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            need = 3; cp = c & 0x07; min = 0x10000;
        } else {
            return 0;
        }
        if (n - i - 1 < need)
            return 0;
        for (unsigned k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += need + 1;
    }
    return 1;
}

/* ---- tokenizers ---------------------------------------------------------- */
/* Vocabularies larger than this are walked in part (keeps each input fast;
 * the parsers have already bounded them by the file). */
#define WALK_MAX_IDS 300000

void fuzz_tok_walk(const eng_tok *t)
{
    uint32_t nv = eng_tok_n_vocab(t);
    FUZZ_ASSERT(nv > 0);
    int32_t bos = eng_tok_bos(t), eos = eng_tok_eos(t), eot = eng_tok_eot(t);
    FUZZ_ASSERT(bos >= -1 && bos < (int64_t)nv);
    FUZZ_ASSERT(eos >= -1 && eos < (int64_t)nv);
    FUZZ_ASSERT(eot >= -1 && eot < (int64_t)nv);
    (void)eng_tok_add_bos(t);
    (void)eng_tok_is_spm(t);
    size_t maxp = eng_tok_max_piece(t);
    for (uint32_t id = 0; id < nv && id < WALK_MAX_IDS; id++) {
        size_t pl = (size_t)-1;
        const char *pc = eng_tok_piece(t, (int32_t)id, &pl);
        FUZZ_ASSERT(pl != (size_t)-1);
        FUZZ_ASSERT(pl <= maxp);
        if (pl) {
            FUZZ_ASSERT(pc != NULL);
            volatile char c = pc[0];
            c = pc[pl - 1];
            (void)c;
        }
        (void)eng_tok_is_control(t, (int32_t)id);
    }
    /* out-of-range ids are refused quietly */
    (void)eng_tok_is_control(t, -1);
    (void)eng_tok_is_control(t, (int32_t)nv);
}

char *fuzz_tok_roundtrip(const eng_tok *t, const char *text, size_t len,
                         int add_special, int parse_special, size_t *out_len)
{
    uint32_t nv = eng_tok_n_vocab(t);
    size_t maxp = eng_tok_max_piece(t);
    /* encode: a short buffer first, then the full count */
    size_t n = 0, n2 = 0, cap0 = 3;
    int32_t *ids0 = malloc(cap0 * sizeof *ids0);
    FUZZ_ASSERT(ids0);
    int rc = eng_tok_encode(t, text, len, add_special, parse_special, ids0,
                            cap0, &n);
    if (rc < 0) {
        FUZZ_ASSERT(rc >= ENG_ELAST);
        free(ids0);
        if (out_len)
            *out_len = 0;
        return out_len ? calloc(1, 1) : NULL;
    }
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    FUZZ_ASSERT(ids);
    rc = eng_tok_encode(t, text, len, add_special, parse_special, ids, n, &n2);
    FUZZ_ASSERT(rc == 0);
    if (n2 != n)
        fuzz_fail("encode counted %zu ids, then %zu", n, n2);
    for (size_t i = 0; i < n && i < cap0; i++)
        if (ids0[i] != ids[i])
            fuzz_fail("encode with a short buffer gave id %d at %zu, the "
                      "full one %d", ids0[i], i, ids[i]);
    free(ids0);

    /* stream the ids back; the documented bound is the buffer */
    size_t cap = 3 * (maxp + 4);
    char *piece = malloc(cap);
    size_t ocap = 64, olen = 0;
    char *out = malloc(ocap);
    FUZZ_ASSERT(piece && out);
    eng_detok d;
    eng_detok_init(&d);
    for (size_t i = 0; i <= n; i++) {
        size_t w;
        if (i < n) {
            FUZZ_ASSERT(ids[i] >= 0 && (uint32_t)ids[i] < nv);
            w = eng_detok_push(&d, t, ids[i], piece, cap);
        } else {
            w = eng_detok_flush(&d, piece, cap);
        }
        FUZZ_ASSERT(w <= cap);
        if (!fuzz_utf8_valid(piece, w))
            fuzz_fail("detokeniser gave invalid UTF-8 for id %d",
                      i < n ? ids[i] : -1);
        if (olen + w > ocap) {
            while (olen + w > ocap)
                ocap *= 2;
            out = realloc(out, ocap);
            FUZZ_ASSERT(out);
        }
        memcpy(out + olen, piece, w);
        olen += w;
    }
    FUZZ_ASSERT(d.n_pend == 0);
    if (!fuzz_utf8_valid(out, olen))
        fuzz_fail("detokenised stream is not valid UTF-8");
    free(piece);
    free(ids);
    if (!out_len) {
        free(out);
        return NULL;
    }
    *out_len = olen;
    return out;
}

/* ---- source models ------------------------------------------------------- */
static void touch(const void *p, uint64_t n)
{
    /* read every byte: an over-read is then an ASan report */
    const volatile unsigned char *b = p;
    unsigned char acc = 0;
    for (uint64_t i = 0; i < n; i++)
        acc ^= b[i];
    (void)acc;
}

void fuzz_walk_src(const fmt_src *s)
{
    const fmt_hparams *h = fmt_src_hparams(s);
    FUZZ_ASSERT(h && h->n_layers > 0 && h->dim > 0 && h->vocab_size > 0);
    FUZZ_ASSERT(memchr(h->arch, '\0', sizeof h->arch));
    const char *kind = fmt_src_kind(s);
    FUZZ_ASSERT(kind);
    for (int r = 0; r < FMT_NROLES; r++) {
        for (unsigned l = 0; l < h->n_layers; l++) {
            const fmt_tensor *t = fmt_src_tensor(s, r, l);
            if (!t)
                continue;
            FUZZ_ASSERT(t->name && t->ndim >= 1 && t->ndim <= 4);
            uint64_t ne = 1;
            for (unsigned d = 0; d < 4; d++)
                ne *= t->ne[d];
            uint64_t sz = fmt_dtype_size(t->dtype, ne);
            if (sz)
                FUZZ_ASSERT(t->nbytes == sz);
            touch(t->data, t->nbytes);
            /* the first row of a type cflow keeps dequantises */
            if (sz && fmt_dtype_tile(t->dtype) >= 0 && t->ne[0] <= (1u << 16)) {
                float *row = malloc(t->ne[0] * sizeof *row);
                FUZZ_ASSERT(row);
                if (fmt_dequant(t->dtype, t->data, row, t->ne[0]) != 0)
                    fuzz_fail("tensor %s: dequantising a readable type "
                              "failed", t->name);
                free(row);
            }
        }
    }
    (void)fmt_src_tensor(s, FMT_R_Q, h->n_layers + 5);
    (void)fmt_src_tensor(s, -1, 0);
    (void)fmt_src_tensor(s, FMT_NROLES, 0);
    const fmt_kv *kv = fmt_src_kv(s);
    if (kv) {
        char err[256] = "";
        eng_tok *t = NULL;
        int rc = eng_tok_load(&t, kv, err, sizeof err);
        fuzz_check_err("eng_tok_load", rc, ENG_ELAST, err, sizeof err);
        if (rc == 0) {
            fuzz_tok_walk(t);
            static const char text[] = "Hello world, once upon a time "
                                       "\xc3\xa9 <s> <|im_end|> 123";
            fuzz_tok_roundtrip(t, text, sizeof text - 1, 1, 1, NULL);
            eng_tok_free(t);
        }
    }
}

/* ---- .cflow models ------------------------------------------------------- */
static int slot_of_matrix(int m, int *global)
{
    static const int slot[FMT_NMATRIX] = {
        [FMT_M_Q] = FMT_S_Q, [FMT_M_K] = FMT_S_K, [FMT_M_V] = FMT_S_V,
        [FMT_M_O] = FMT_S_O, [FMT_M_GATE] = FMT_S_GATE,
        [FMT_M_UP] = FMT_S_UP, [FMT_M_DOWN] = FMT_S_DOWN,
        [FMT_M_ROUTER] = FMT_S_ROUTER, [FMT_M_EXP_GATE] = FMT_S_EXP_GATE,
        [FMT_M_EXP_UP] = FMT_S_EXP_UP, [FMT_M_EXP_DOWN] = FMT_S_EXP_DOWN,
        [FMT_M_TOK_EMBD] = FMT_S_TOK_EMBD, [FMT_M_OUTPUT] = FMT_S_OUTPUT,
        [FMT_M_SH_GATE] = FMT_S_SH_GATE, [FMT_M_SH_UP] = FMT_S_SH_UP,
        [FMT_M_SH_DOWN] = FMT_S_SH_DOWN, [FMT_M_K_B] = FMT_S_K_B,
        [FMT_M_V_B] = FMT_S_V_B, [FMT_M_Q_B] = FMT_S_Q_B,
    };
    *global = m == FMT_M_TOK_EMBD || m == FMT_M_OUTPUT;
    return slot[m];
}

static float tilebuf[KERN_TILE_ROWS * KERN_TILE_COLS];

/* Every tile of a stream: sane header, inside its matrix, dequantisable.
 * covered[m] accumulates the elements of matrix m. */
static void walk_stream(const fmt_model *m, unsigned layer,
                        const fmt_stream *st, int expert, uint64_t *covered)
{
    const fmt_hparams *h = fmt_model_hparams(m);
    FUZZ_ASSERT(st->offset <= fmt_model_file_size(m) &&
                st->length <= fmt_model_file_size(m) - st->offset);
    for (uint32_t i = 0; i < st->n_tiles; i++) {
        const fmt_tile *t = &st->tiles[i];
        FUZZ_ASSERT(t->type < KERN_NTYPES);
        FUZZ_ASSERT(t->rows >= 1 && t->rows <= KERN_TILE_ROWS);
        FUZZ_ASSERT(t->cols >= 1 && t->cols <= KERN_TILE_COLS);
        FUZZ_ASSERT(t->matrix < FMT_NMATRIX);
        FUZZ_ASSERT(expert < 0 ? t->expert == FMT_NO_EXPERT
                               : t->expert == (unsigned)expert);
        int global;
        int slot = slot_of_matrix(t->matrix, &global);
        const fmt_matinfo *mi =
            fmt_model_matinfo(m, global ? h->n_layers : layer, slot);
        if (!mi)
            fuzz_fail("layer %u: a tile of matrix %u, whose slot is absent",
                      layer, t->matrix);
        FUZZ_ASSERT((uint64_t)t->row0 + t->rows <= mi->rows);
        FUZZ_ASSERT((uint32_t)t->col0 + t->cols <= mi->cols);
        FUZZ_ASSERT(t->type == mi->type);
        covered[t->matrix] += (uint64_t)t->rows * t->cols;
        kern_tile_unpack((enum kern_type)t->type, t->rows, t->cols,
                         t->payload, tilebuf, KERN_TILE_COLS);
        touch(t->payload,
              kern_tile_payload_size((enum kern_type)t->type, t->rows,
                                     t->cols));
    }
}

static void check_cover(const fmt_model *m, unsigned layer,
                        const uint64_t *covered, uint64_t mult)
{
    const fmt_hparams *h = fmt_model_hparams(m);
    for (int mx = 0; mx < FMT_NMATRIX; mx++) {
        int global;
        int slot = slot_of_matrix(mx, &global);
        if (global != (layer == h->n_layers) || mx == FMT_M_ROUTER)
            continue;
        int exp = mx >= FMT_M_EXP_GATE && mx <= FMT_M_EXP_DOWN;
        if ((mult > 1) != exp)
            continue;
        const fmt_matinfo *mi = fmt_model_matinfo(m, layer, slot);
        uint64_t want = mi ? (uint64_t)mi->rows * mi->cols * mult : 0;
        if (covered[mx] != want)
            fuzz_fail("layer %u matrix %d: tiles cover %llu elements of "
                      "%llu", layer, mx, (unsigned long long)covered[mx],
                      (unsigned long long)want);
    }
}

void fuzz_walk_model(const fmt_model *m)
{
    const fmt_hparams *h = fmt_model_hparams(m);
    FUZZ_ASSERT(h && h->n_layers > 0 && h->dim > 0);
    FUZZ_ASSERT(fmt_model_path(m) != NULL);
    for (unsigned l = 0; l <= h->n_layers; l++) {
        uint64_t covered[FMT_NMATRIX] = { 0 };
        for (int s = 0; s < FMT_NSLOT_ALL; s++) {   /* (the families' slots too) */
            const fmt_stream *st = fmt_model_stream(m, l, s);
            if (st)
                walk_stream(m, l, st, -1, covered);
            uint64_t n = 0;
            const float *v = fmt_model_vec(m, l, s, &n);
            if (v)
                touch(v, n * sizeof *v);
            const fmt_matinfo *mi = fmt_model_matinfo(m, l, s);
            if (mi)
                FUZZ_ASSERT(mi->present && mi->type < KERN_NTYPES);
        }
        /* experts only in layers, and only when the model has them */
        if (l < h->n_layers && h->n_experts > 0 &&
            fmt_model_expert(m, l, 0, NULL, NULL, NULL, NULL) == 0) {
            uint64_t ecov[FMT_NMATRIX] = { 0 };
            for (unsigned e = 0; e < h->n_experts; e++) {
                const fmt_stream *gu = NULL, *dn = NULL;
                uint64_t off = 0, len = 0;
                FUZZ_ASSERT(fmt_model_expert(m, l, e, &gu, &dn, &off, &len)
                            == 0);
                FUZZ_ASSERT(gu && dn);
                FUZZ_ASSERT(off <= fmt_model_file_size(m) &&
                            len <= fmt_model_file_size(m) - off);
                walk_stream(m, l, gu, (int)e, ecov);
                walk_stream(m, l, dn, (int)e, ecov);
            }
            check_cover(m, l, ecov, h->n_experts);
        }
        check_cover(m, l, covered, 1);
    }
    FUZZ_ASSERT(fmt_model_stream(m, h->n_layers + 1, FMT_S_Q) == NULL);
    FUZZ_ASSERT(fmt_model_stream(m, 0, FMT_NSLOT_ALL) == NULL);
    FUZZ_ASSERT(fmt_model_expert(m, h->n_layers, 0, NULL, NULL, NULL, NULL)
                != 0);
    const fmt_kv *kv = fmt_model_kv(m);
    if (kv) {
        char err[256] = "";
        eng_tok *t = NULL;
        int rc = eng_tok_load(&t, kv, err, sizeof err);
        fuzz_check_err("eng_tok_load", rc, ENG_ELAST, err, sizeof err);
        if (rc == 0) {
            fuzz_tok_walk(t);
            static const char text[] = "Once upon a time \xe2\x96\x81 "
                                       "<|im_start|> \xff";
            fuzz_tok_roundtrip(t, text, sizeof text - 1, 1, 1, NULL);
            eng_tok_free(t);
        }
    }
}

/* ---- conversion ----------------------------------------------------------- */
static void same_stream(const fmt_stream *a, const fmt_stream *b,
                        const char *what, unsigned l, int slot)
{
    if (!a || !b) {
        if (a != b)
            fuzz_fail(".cflow and .vflow differ: %s %u/%d present in one",
                      what, l, slot);
        return;
    }
    if (a->n_tiles != b->n_tiles || a->length != b->length)
        fuzz_fail(".cflow and .vflow differ: %s %u/%d has %u/%u tiles, "
                  "%llu/%llu bytes", what, l, slot, a->n_tiles, b->n_tiles,
                  (unsigned long long)a->length,
                  (unsigned long long)b->length);
    for (uint32_t i = 0; i < a->n_tiles; i++) {
        const fmt_tile *x = &a->tiles[i], *y = &b->tiles[i];
        if (x->row0 != y->row0 || x->col0 != y->col0 || x->rows != y->rows ||
            x->cols != y->cols || x->matrix != y->matrix ||
            x->type != y->type || x->expert != y->expert ||
            memcmp(x->payload, y->payload,
                   kern_tile_payload_size((enum kern_type)x->type, x->rows,
                                          x->cols)) != 0)
            fuzz_fail(".cflow and .vflow differ: %s %u/%d tile %u", what, l,
                      slot, i);
    }
}

/* The two layouts of one source must describe the same model. */
static void same_model(const fmt_model *a, const fmt_model *b)
{
    const fmt_hparams *h = fmt_model_hparams(a);
    if (memcmp(h, fmt_model_hparams(b), sizeof *h) != 0)
        fuzz_fail(".cflow and .vflow differ in their hyper-parameters");
    for (unsigned l = 0; l <= h->n_layers; l++) {
        for (int s = 0; s < FMT_NSLOT; s++) {
            same_stream(fmt_model_stream(a, l, s), fmt_model_stream(b, l, s),
                        "stream", l, s);
            uint64_t na = 0, nb = 0;
            const float *va = fmt_model_vec(a, l, s, &na);
            const float *vb = fmt_model_vec(b, l, s, &nb);
            if (!va != !vb || na != nb ||
                (va && memcmp(va, vb, na * sizeof *va) != 0))
                fuzz_fail(".cflow and .vflow differ: vector %u/%d", l, s);
        }
        for (unsigned e = 0; l < h->n_layers && e < h->n_experts; e++) {
            const fmt_stream *ga = NULL, *da = NULL, *gb = NULL, *db = NULL;
            int ra = fmt_model_expert(a, l, e, &ga, &da, NULL, NULL);
            int rb = fmt_model_expert(b, l, e, &gb, &db, NULL, NULL);
            if (ra != rb)
                fuzz_fail(".cflow and .vflow differ: expert %u of layer %u",
                          e, l);
            if (ra == 0) {
                same_stream(ga, gb, "expert gate/up", l, (int)e);
                same_stream(da, db, "expert down", l, (int)e);
            }
        }
    }
}

void fuzz_convert_check(const fmt_src *s)
{
    fmt_model *m[2] = { NULL, NULL };
    static const char *const names[2] = { "converted.cflow",
                                          "converted.vflow" };
    for (int v = 0; v < 2; v++) {
        char err[512] = "";
        fmt_convert_opts o;
        memset(&o, 0, sizeof o);
        o.force_type = -1;
        o.vflow = v;
        const char *out = fuzz_path(names[v]);
        int rc = fmt_cflow_write(s, out, &o, err, sizeof err);
        fuzz_check_err("fmt_cflow_write", rc, FMT_EARG, err, sizeof err);
        if (rc < 0) {
            /* the layout does not change what can be converted */
            if (v == 1 && m[0])
                fuzz_fail("the .cflow was written but not the .vflow: %s",
                          err);
            break;
        }
        if (v == 1 && !m[0])
            fuzz_fail("the .vflow was written but not the .cflow");
        err[0] = '\0';
        rc = fmt_model_open(&m[v], out, err, sizeof err);
        if (rc < 0)
            fuzz_fail("the reader refuses what the writer wrote: %s", err);
        const fmt_hparams *a = fmt_src_hparams(s), *b = fmt_model_hparams(m[v]);
        if (a->n_layers != b->n_layers || a->dim != b->dim ||
            a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads ||
            a->head_dim != b->head_dim || a->n_experts != b->n_experts)
            fuzz_fail("converted geometry differs: layers %u/%u dim %u/%u "
                      "heads %u/%u kv %u/%u head_dim %u/%u experts %u/%u",
                      a->n_layers, b->n_layers, a->dim, b->dim, a->n_heads,
                      b->n_heads, a->n_kv_heads, b->n_kv_heads, a->head_dim,
                      b->head_dim, a->n_experts, b->n_experts);
        fuzz_walk_model(m[v]);
        unlink(out);
    }
    if (m[0] && m[1])
        same_model(m[0], m[1]);
    fmt_model_close(m[0]);
    fmt_model_close(m[1]);
}
