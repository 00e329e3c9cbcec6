/*
 * fmt_hf_cfg.c — config.json's values, read with json-c: each accessor
 * takes a fmt_hf_cfg (the object, and the file and error buffer an error
 * names) and tells present, absent and of the wrong type or range apart
 * (fmt_impl.h).  fmt_hf.c's common keys and the families' own
 * (fmt_hf_family.c) are read through these, so a field of the wrong type
 * gets the same one-line error whoever reads it; below both.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include <json-c/json.h>

#include "format/cflow_format.h"
#include "format/fmt_impl.h"

int fmt_hf_json_u64(void *jo, uint64_t *out)
{
    json_object *o = jo;
    if (!o || !json_object_is_type(o, json_type_int))
        return -1;
    int64_t v = json_object_get_int64(o);
    if (v < 0)
        return -1;
    /* values above INT64_MAX saturate; they fail the range checks later */
    *out = (uint64_t)v;
    return 0;
}

int fmt_hf_u32(const fmt_hf_cfg *c, const char *key, uint32_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(c->o, key, &v) || !v)
        return 0;
    uint64_t x;
    if (fmt_hf_json_u64(v, &x) < 0) {
        fmt_err(c->err, c->errlen, "%s: %s is not a non-negative integer",
                c->path, key);
        return -1;
    }
    if (x > UINT32_MAX) {
        fmt_err(c->err, c->errlen, "%s: %s %llu is over the %u cflow reads", c->path,
                key, (unsigned long long)x, UINT32_MAX);
        return -1;
    }
    *out = (uint32_t)x;
    return 1;
}

int fmt_hf_f32(const fmt_hf_cfg *c, const char *key, float *out)
{
    json_object *v;
    if (!json_object_object_get_ex(c->o, key, &v) || !v)
        return 0;
    if (!json_object_is_type(v, json_type_double) &&
        !json_object_is_type(v, json_type_int)) {
        fmt_err(c->err, c->errlen, "%s: %s is not a number", c->path, key);
        return -1;
    }
    *out = (float)json_object_get_double(v);
    return 1;
}

const char *fmt_hf_str(const fmt_hf_cfg *c, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(c->o, key, &v) || !v ||
        !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

int fmt_hf_bool(const fmt_hf_cfg *c, const char *key, int dflt)
{
    json_object *v;
    if (!json_object_object_get_ex(c->o, key, &v) || !v ||
        !json_object_is_type(v, json_type_boolean))
        return dflt;
    return json_object_get_boolean(v) ? 1 : 0;
}

int fmt_hf_obj(const fmt_hf_cfg *c, const char *key, fmt_hf_cfg *sub)
{
    json_object *v;
    *sub = *c;
    if (!json_object_object_get_ex(c->o, key, &v) || !v)
        return 0;
    if (!json_object_is_type(v, json_type_object)) {
        fmt_err(c->err, c->errlen, "%s: %s is not an object", c->path, key);
        return -1;
    }
    sub->o = v;
    return 1;
}

int fmt_hf_f32s(const fmt_hf_cfg *c, const char *key, float *out, size_t n)
{
    json_object *v;
    if (!json_object_object_get_ex(c->o, key, &v) || !v)
        return 0;
    if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) != n) {
        fmt_err(c->err, c->errlen, "%s: %s is not an array of %zu numbers", c->path, key, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(v, i);
        if (!e || !(json_object_is_type(e, json_type_double) ||
                    json_object_is_type(e, json_type_int))) {
            fmt_err(c->err, c->errlen, "%s: %s[%zu] is not a number", c->path, key, i);
            return -1;
        }
        out[i] = (float)json_object_get_double(e);
    }
    return 1;
}

int fmt_hf_str_at(const fmt_hf_cfg *c, const char *key, size_t i, const char **out)
{
    json_object *v;
    if (!json_object_object_get_ex(c->o, key, &v) || !v)
        return 0;
    if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) > 65536) {
        fmt_err(c->err, c->errlen, "%s: %s is not an array of strings", c->path, key);
        return -1;
    }
    size_t n = json_object_array_length(v);
    if (out) {
        json_object *e = i < n ? json_object_array_get_idx(v, i) : NULL;
        *out = e && json_object_is_type(e, json_type_string) ? json_object_get_string(e)
                                                             : NULL;
    }
    return (int)n;
}
