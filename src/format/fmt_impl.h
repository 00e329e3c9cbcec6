/*
 * fmt_impl.h — private to src/format: helpers shared by the readers and
 * writers of this module (never installed, never included outside it).
 *
 * Several files add declarations here; keep edits additive and group them
 * by the file that defines them.
 */
#ifndef CFLOW_FMT_IMPL_H
#define CFLOW_FMT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "format/cflow_format.h"

/* ---- little-endian loads from unaligned bytes (x86-64 is little endian;
 * memcpy keeps the reads free of alignment and aliasing trouble) -------- */
static inline uint16_t fmt_rd_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline uint32_t fmt_rd_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline uint64_t fmt_rd_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline float fmt_rd_f32(const uint8_t *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ---- fmt_kv.c ---------------------------------------------------------- */
/* printf into err[errlen] (one line: newlines in the result become spaces).
 * Safe with err == NULL or errlen == 0. */
void fmt_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Copy at most 48 bytes of an untrusted name into out[64], replacing
 * anything that is not printable ASCII with '?', for error messages. */
const char *fmt_safe_name(char out[64], const char *s, size_t len);

/* Open-addressing index from names to small integers (tensor names, keys).
 * The caller keeps the names; the index stores only positions. */
typedef struct fmt_names {
    const char **name;  /* [cap] borrowed pointers, NULL = empty slot */
    size_t      *len;   /* [cap] */
    size_t      *val;   /* [cap] */
    size_t       cap;   /* power of two, or 0 */
    size_t       count;
} fmt_names;
uint64_t fmt_name_hash(const char *s, size_t len);
/* Insert (name,len) -> val; returns 0, 1 if the name is already present
 * (*old gets its value when old != NULL; nothing is changed), -1 on ENOMEM. */
int  fmt_names_put(fmt_names *t, const char *s, size_t len, size_t val,
                   size_t *old);
/* 0 and *val set when found, -1 otherwise. */
int  fmt_names_get(const fmt_names *t, const char *s, size_t len,
                   size_t *val);
void fmt_names_free(fmt_names *t);

/* ---- fmt_gguf.c -------------------------------------------------------- */
/* A read-only mapping of a whole file. */
typedef struct fmt_map {
    const uint8_t *p;   /* NULL when empty */
    size_t         n;   /* bytes */
} fmt_map;
/* Map path read-only; an empty file is an FMT_EFORMAT error. */
int  fmt_map_open(fmt_map *m, const char *path, char *err, size_t errlen);
void fmt_map_close(fmt_map *m);

/* ---- fmt_dequant.c ----------------------------------------------------- */
float fmt_f16_to_f32(uint16_t h);
float fmt_bf16_to_f32(uint16_t h);
/* GGML block geometry: weights per block and bytes per block; 0 when the
 * type is unknown. */
unsigned fmt_dtype_block(int dtype);
unsigned fmt_dtype_block_bytes(int dtype);

#endif /* CFLOW_FMT_IMPL_H */
