/*
 * tok_test.c — the helpers the tokenizer tests share (tok_test.h).
 */
#include "config.h"

#include "tok_test.h"

static char g_tmp[256];

/* Encode into a malloc'd array (checks the retry-with-larger-buffer
 * contract on the way). */
int32_t *tt_encode(const eng_tok *t, const char *s, size_t len, int add,
                   int parse, size_t *n)
{
    size_t need = 0, got = 0;
    int32_t probe[2], *ids;
    assert_int_equal(eng_tok_encode(t, s, len, add, parse, probe, 2, &need),
                     0);
    ids = malloc((need + 1) * sizeof *ids);
    assert_non_null(ids);
    assert_int_equal(eng_tok_encode(t, s, len, add, parse, ids, need, &got),
                     0);
    assert_int_equal(got, need);
    if (need >= 1)
        assert_int_equal(ids[0], probe[0]);
    if (need >= 2)
        assert_int_equal(ids[1], probe[1]);
    *n = got;
    return ids;
}

/* Run every vector of inp/out against t; returns the number that match
 * and prints the first mismatches. */
void tt_run_vectors(const char *name, const eng_tok *t, const char *inp,
                    const char *outp)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t ilen, n_ok = 0, n_all = 0, shown = 0;
    char *in = tu_slurp(inp, &ilen), *out = tu_slurp(outp, NULL);
    char *pos = in, *line = out;
    while (pos < in + ilen) {
        char *nx = strstr(pos, sep), *eol;
        size_t slen = nx ? (size_t)(nx - pos) : (size_t)(in + ilen - pos);
        size_t n_got, n_exp = 0;
        int32_t *got, exp[512];
        int ok;
        if (!*line)
            fail_msg("%s: fewer output lines than inputs", name);
        eol = strchr(line, '\n');
        if (eol)
            *eol = 0;
        for (char *p = line; *p;) {
            char *e;
            long v = strtol(p, &e, 10);
            if (e == p)
                break;
            assert_true(n_exp < 512);
            exp[n_exp++] = (int32_t)v;
            p = e;
        }
        got = tt_encode(t, pos, slen, 0, 0, &n_got);
        ok = n_got == n_exp && memcmp(got, exp, n_got * sizeof *got) == 0;
        n_ok += ok;
        n_all++;
        if (!ok && shown++ < 5) {
            printf("  %s: mismatch for \"%.*s\"\n    want:", name, (int)slen,
                   pos);
            for (size_t i = 0; i < n_exp; i++)
                printf(" %d", exp[i]);
            printf("\n    got: ");
            for (size_t i = 0; i < n_got; i++)
                printf(" %d", got[i]);
            printf("\n");
        }
        free(got);
        line = eol ? eol + 1 : line + strlen(line);
        if (!nx)
            break;
        pos = nx + sizeof sep - 1;
    }
    printf("  %s: %zu/%zu strings match\n", name, n_ok, n_all);
    assert_true(n_all > 0);
    assert_int_equal(*line, 0); /* as many outputs as inputs */
    assert_int_equal(n_ok, n_all);
    free(in);
    free(out);
}

eng_tok *tt_load_gguf_tok(const char *rel, fmt_gguf **g)
{
    char err[256];
    eng_tok *t = NULL;
    if (fmt_gguf_open(g, tu_shared(rel), err, sizeof err) != 0)
        fail_msg("%s", err);
    if (eng_tok_load(&t, fmt_gguf_kv(*g), err, sizeof err) != 0)
        fail_msg("%s", err);
    return t;
}

eng_tok *tt_load_vocab_tok(const char *path, fmt_kv **kvp)
{
    char err[512];
    eng_tok *t = NULL;
    fmt_kv *kv = fmt_kv_new();
    assert_non_null(kv);
    if (fmt_vocab_load(kv, path, err, sizeof err) != 0)
        fail_msg("fmt_vocab_load: %s", err);
    if (eng_tok_load(&t, kv, err, sizeof err) != 0)
        fail_msg("eng_tok_load: %s", err);
    if (kvp)
        *kvp = kv;
    else
        fmt_kv_free(kv);
    return t;
}

void tt_assert_kv_str(const fmt_kv *kv, const char *key, const char *want)
{
    size_t n;
    const char *s = fmt_kv_get_str(kv, key, &n);
    if (!s)
        fail_msg("no %s", key);
    if (n != strlen(want) || memcmp(s, want, n))
        fail_msg("%s is '%.*s', want '%s'", key, (int)n, s, want);
}

const char *tt_tmpdir(void)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/cflow-test-tok-XXXXXX");
    assert_non_null(mkdtemp(g_tmp));
    return g_tmp;
}

void tt_rm_dir(const char *dir, const char *const *names)
{
    char p[512];
    for (size_t i = 0; names[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        remove(p);
    }
    remove(dir);
}

void tt_write_text(const char *dir, const char *name, const char *text)
{
    char p[512];
    FILE *f;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}
