/*
 * test_models.c — issue 20 item 1: a GGUF, a Hugging Face folder or a
 * llama2.c checkpoint runs wherever a model is taken, through a cache of
 * conversions in $XDG_CACHE_HOME/cflow keyed by content, and `cflow
 * models` lists and frees it.  The real binary, a private XDG_CACHE_HOME.
 *
 * Must show 1: `cflow run -m FILE.gguf` gives the same greedy text as its
 * explicit `cflow convert`, and the second start reuses the conversion
 * (the cache file's inode and mtime unchanged, no "converted" line).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static char cache[4096];   /* $XDG_CACHE_HOME/cflow */

/* A copy of a shared file into the scratch folder (a source the test may
 * change); returns its path (tu_tmp's buffer). */
static const char *copy_shared(const char *rel, const char *name)
{
    const char *src = tu_shared(rel);
    tu_require(src);
    size_t len;
    char *b = tu_read_file(src, &len);
    assert_non_null(b);
    const char *dst = tu_tmp(name);
    assert_int_equal(tu_write_file(dst, b, len), 0);
    free(b);
    return dst;
}

/* The cache's .cflow files: their count, the first one's path into
 * first[4096] (when not NULL), and whether any temporary file is there. */
static int cached(char *first, int *tmp_left)
{
    DIR *d = opendir(cache);
    struct dirent *de;
    int n = 0;
    if (tmp_left)
        *tmp_left = 0;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (tmp_left && strstr(de->d_name, ".tmp."))
            *tmp_left = 1;
        if (l > 6 && !strcmp(de->d_name + l - 6, ".cflow")) {
            if (first && n == 0)
                assert_true(snprintf(first, 4096, "%s/%s", cache, de->d_name) < 4096);
            n++;
        }
    }
    if (d)
        closedir(d);
    return n;
}

static void clear_cache(void)
{
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "models", "clear", (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow models clear"));
    tu_proc_free(&p);
    assert_int_equal(cached(NULL, NULL), 0);
}

/* Greedy text of model: stdout of cflow run (stderr into *err when not
 * NULL, malloc'd). */
static char *greedy(const char *model, char **err)
{
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "run", "-m", model, "--temp", "0", "-n", "40", "-p",
                                  "Once upon a time", "--no-log", "--no-profile", (char *)NULL),
                     0);
    assert_true(tu_ok(&p, "cflow run"));
    char *out = p.out;
    p.out = NULL;
    if (err) {
        *err = p.err;
        p.err = NULL;
    }
    tu_proc_free(&p);
    return out;
}

/* Must show 1. */
static void test_gguf_runs_as_converted(void **state)
{
    (void)state;
    clear_cache();
    char gguf[4096], explicit[4096], conv[4096], *err;
    snprintf(gguf, sizeof gguf, "%s", copy_shared("models/stories260K-q8_0.gguf", "s.gguf"));
    snprintf(explicit, sizeof explicit, "%s", tu_tmp("explicit.cflow"));
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "convert", gguf, explicit, (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow convert"));
    tu_proc_free(&p);
    char *want = greedy(explicit, NULL);
    assert_true(strlen(want) > 40);

    char *got = greedy(gguf, &err);
    assert_string_equal(got, want);
    assert_int_equal(cached(conv, NULL), 1);
    /* one line says where the conversion went; the run used it */
    char line[8192];
    assert_true(snprintf(line, sizeof line, "cflow: converted %s into %s (", gguf, conv) < (int)sizeof line);
    if (!strstr(err, line))
        print_error("stderr:\n%s\nwanted: %s\n", err, line);
    assert_non_null(strstr(err, line));
    snprintf(line, sizeof line, "cflow: model %s,", conv);
    assert_non_null(strstr(err, line));
    /* the cache holds what cflow convert writes, byte for byte */
    size_t la, lb;
    char *a = tu_read_file(explicit, &la), *b = tu_read_file(conv, &lb);
    assert_true(a && b && la == lb && !memcmp(a, b, la));
    free(a);
    free(b);
    free(got);
    free(err);

    /* the second start: the same file, not converted again */
    struct stat s1, s2;
    assert_int_equal(stat(conv, &s1), 0);
    got = greedy(gguf, &err);
    assert_string_equal(got, want);
    assert_null(strstr(err, "converted"));
    assert_non_null(strstr(err, line));
    assert_int_equal(stat(conv, &s2), 0);
    assert_true(s1.st_ino == s2.st_ino && s1.st_mtim.tv_sec == s2.st_mtim.tv_sec &&
                s1.st_mtim.tv_nsec == s2.st_mtim.tv_nsec);
    assert_int_equal(cached(NULL, NULL), 1);
    free(got);
    free(err);
    free(want);
}

/* A source changed in place (same size, mtime put back) is converted
 * anew; a damaged one is refused in one line and leaves nothing in the
 * cache; a damaged cache file is made again. */
static void test_changed_and_corrupt(void **state)
{
    (void)state;
    clear_cache();
    char gguf[4096], first[4096], *err;
    snprintf(gguf, sizeof gguf, "%s", copy_shared("models/stories260K-f32.gguf", "c.gguf"));
    char *before = greedy(gguf, &err);
    free(err);
    assert_int_equal(cached(first, NULL), 1);

    /* one float of the last tensor's data, and the old mtime restored: the
     * content key sees it */
    struct stat st;
    assert_int_equal(stat(gguf, &st), 0);
    size_t len;
    char *b = tu_read_file(gguf, &len);
    assert_non_null(b);
    b[len - 1000] ^= 0x40;
    int fd = open(gguf, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, b + len - 1000, 1, (off_t)(len - 1000)), 1);
    close(fd);
    struct timespec ts[2] = { st.st_atim, st.st_mtim };
    assert_int_equal(utimensat(AT_FDCWD, gguf, ts, 0), 0);
    free(b);
    char *after = greedy(gguf, &err);
    assert_non_null(strstr(err, "cflow: converted"));
    assert_null(strstr(err, first));
    free(err);
    free(before);
    free(after);
    assert_int_equal(cached(NULL, NULL), 2);
    tu_proc p;
    assert_int_equal(tu_cflow_run(&p, "models", (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow models"));
    assert_non_null(strstr(p.out, "(changed since)"));
    assert_non_null(strstr(p.out, "2 conversions"));
    tu_proc_free(&p);

    /* a truncated GGUF: one line naming it, nothing new in the cache */
    char trunc[4096];
    snprintf(trunc, sizeof trunc, "%s", tu_tmp("trunc.gguf"));
    b = tu_read_file(gguf, &len);
    assert_int_equal(tu_write_file(trunc, b, len / 2), 0);
    free(b);
    assert_int_equal(tu_cflow_run(&p, "run", "-m", trunc, "-n", "4", "--no-log", (char *)NULL),
                     0);
    assert_int_equal(p.status, 1);
    assert_int_equal(tu_count_lines(p.err), 1);
    assert_non_null(strstr(p.err, trunc));
    tu_proc_free(&p);
    int tmp_left;
    assert_int_equal(cached(NULL, &tmp_left), 2);
    assert_false(tmp_left);

    /* the cached conversion truncated: not opened, made again */
    clear_cache();
    free(greedy(gguf, &err));
    free(err);
    assert_int_equal(cached(first, NULL), 1);
    assert_int_equal(truncate(first, 1000), 0);
    free(greedy(gguf, &err));
    assert_non_null(strstr(err, "cflow: converted"));
    free(err);
    assert_int_equal(stat(first, &st), 0);
    assert_true(st.st_size > 1000);
}

/* The other sources and commands: a llama2.c checkpoint with its
 * tokenizer beside it (cflow run), an HF folder (cflow inspect), a GGUF
 * in cflow ppl and cflow bench; then cflow models lists them and frees
 * one, refuses a name it does not hold, and clear empties the cache. */
static void test_models_list_and_free(void **state)
{
    (void)state;
    clear_cache();
    tu_proc p;
    char bin[4096];
    snprintf(bin, sizeof bin, "%s", tu_tmp("l2c/stories260K.bin"));
    mkdir(tu_tmp("l2c"), 0700);
    {
        size_t len;
        char *b = tu_read_file(tu_shared("models/stories260K.bin"), &len);
        assert_non_null(b);
        assert_int_equal(tu_write_file(bin, b, len), 0);
        free(b);
    }
    /* without its tokenizer: said so, in one line */
    assert_int_equal(tu_cflow_run(&p, "run", "-m", bin, "-n", "4", "--no-log", (char *)NULL), 0);
    assert_int_equal(p.status, 1);
    assert_non_null(strstr(p.err, "needs its tokenizer"));
    assert_int_equal(tu_count_lines(p.err), 1);
    tu_proc_free(&p);
    {
        size_t len;
        char *b = tu_read_file(tu_shared("models/tok512.bin"), &len);
        assert_non_null(b);
        assert_int_equal(tu_write_file(tu_tmp("l2c/tok512.bin"), b, len), 0);
        free(b);
    }
    char *out = greedy(bin, NULL);
    assert_non_null(strstr(out, "Lily"));
    free(out);

    const char *sd = getenv("CFLOW_SRCDIR");
    char hf[4096];
    snprintf(hf, sizeof hf, "%s/tests/data/moe/qwen3-tiny-hf", sd ? sd : "..");
    assert_int_equal(tu_cflow_run(&p, "inspect", hf, (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow inspect HF"));
    assert_non_null(strstr(p.out, "architecture qwen3, source hf"));
    tu_proc_free(&p);

    const char *gguf = copy_shared("models/stories260K-q4_0.gguf", "q4.gguf");
    const char *text = tu_tmp("story.txt");
    const char story[] = "Once upon a time, there was a little girl named Lily. She liked "
                         "to play in the park with her dog.\n";
    assert_int_equal(tu_write_file(text, story, sizeof story - 1), 0);
    assert_int_equal(tu_cflow_run(&p, "ppl", "-m", gguf, text, (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow ppl GGUF"));
    assert_non_null(strstr(p.out, "perplexity"));
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "bench", "-m", gguf, "-p", "8", "-n", "4", "-r", "1",
                                  "--no-warmup", "--read-bw", "10", (char *)NULL),
                     0);
    assert_true(tu_ok(&p, "cflow bench GGUF"));
    assert_non_null(strstr(p.out, "| tg4 |"));
    tu_proc_free(&p);
    assert_int_equal(cached(NULL, NULL), 3);

    /* the list: every conversion with its source */
    assert_int_equal(tu_cflow_run(&p, "models", "list", (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow models list"));
    assert_non_null(strstr(p.out, "NAME"));
    assert_non_null(strstr(p.out, "stories260K-"));
    assert_non_null(strstr(p.out, "qwen3-tiny-hf-"));
    assert_non_null(strstr(p.out, "q4-"));
    assert_non_null(strstr(p.out, "3 conversions"));
    assert_non_null(strstr(p.out, cache));
    tu_proc_free(&p);

    /* rm by source path; a name it does not hold changes nothing */
    assert_int_equal(tu_cflow_run(&p, "models", "rm", "no-such-model", (char *)NULL), 0);
    assert_int_equal(p.status, 1);
    assert_non_null(strstr(p.err, "no-such-model"));
    tu_proc_free(&p);
    assert_int_equal(cached(NULL, NULL), 3);
    assert_int_equal(tu_cflow_run(&p, "models", "rm", gguf, (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow models rm"));
    assert_non_null(strstr(p.out, "removed q4-"));
    tu_proc_free(&p);
    assert_int_equal(cached(NULL, NULL), 2);

    /* an interrupted conversion's leftover is never opened; clear frees it */
    char left[8192];
    snprintf(left, sizeof left, "%s/q4-0123456789abcdef.cflow.tmp.Ab12Cd", cache);
    assert_int_equal(tu_write_file(left, "CFLOW", 5), 0);
    assert_int_equal(tu_cflow_run(&p, "models", (char *)NULL), 0);
    assert_non_null(strstr(p.out, "interrupted"));
    tu_proc_free(&p);
    assert_int_equal(tu_cflow_run(&p, "models", "clear", (char *)NULL), 0);
    assert_true(tu_ok(&p, "cflow models clear"));
    assert_non_null(strstr(p.out, "2 conversions removed"));
    tu_proc_free(&p);
    int tmp_left;
    assert_int_equal(cached(NULL, &tmp_left), 0);
    assert_false(tmp_left);
    assert_int_equal(tu_cflow_run(&p, "models", (char *)NULL), 0);
    assert_non_null(strstr(p.out, "is empty"));
    tu_proc_free(&p);
}

/* Two processes converting the same model at once: both run, one
 * conversion in the cache, no temporary file left. */
static void test_two_at_once(void **state)
{
    (void)state;
    clear_cache();
    const char *gguf = copy_shared("models/stories260K-f16.gguf", "two.gguf");
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "for i in 1 2 3; do \"$0\" run -m \"$1\" --temp 0 -n 16 --no-log --no-profile "
             ">\"$2.$i\" 2>/dev/null & done; wait; cmp \"$2.1\" \"$2.2\" && cmp \"$2.1\" \"$2.3\" "
             "&& test -s \"$2.1\"");
    char *argv[] = { "/bin/sh", "-c", cmd, (char *)tu_cflow(), (char *)gguf,
                     (char *)tu_tmp("two.out"), NULL };
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 300), 0);
    assert_true(tu_ok(&p, "three cflow run at once"));
    tu_proc_free(&p);
    int tmp_left;
    assert_int_equal(cached(NULL, &tmp_left), 1);
    assert_false(tmp_left);
}

/* A cache folder that cannot be made: one line naming it, exit 1. */
static void test_unwritable_cache(void **state)
{
    (void)state;
    const char *gguf = copy_shared("models/stories260K-q8_0.gguf", "u.gguf");
    char file[4096], env[4200], want[4200];
    snprintf(file, sizeof file, "%s", tu_tmp("not-a-folder"));
    assert_int_equal(tu_write_file(file, "x", 1), 0);
    snprintf(env, sizeof env, "XDG_CACHE_HOME=%s", file);
    snprintf(want, sizeof want, "cflow: cannot create the model cache %s/cflow: Not a directory",
             file);
    char *const envv[] = { env, NULL };
    tu_proc p;
    assert_int_equal(tu_cflow_env(&p, envv, "run", "-m", gguf, "-n", "4", "--no-log",
                                  (char *)NULL),
                     0);
    assert_int_equal(p.status, 1);
    assert_int_equal(tu_count_lines(p.err), 1);
    if (!strstr(p.err, want))
        print_error("stderr: %s\nwanted: %s\n", p.err, want);
    assert_non_null(strstr(p.err, want));
    assert_int_equal(p.out_len, 0);
    tu_proc_free(&p);
    /* a .cflow needs no cache at all */
    const char *conv = tu_convert_shared("models/stories260K-q8_0.gguf", "u.cflow");
    assert_non_null(conv);
    assert_int_equal(tu_cflow_env(&p, envv, "run", "-m", conv, "-n", "4", "--no-log",
                                  (char *)NULL),
                     0);
    assert_true(tu_ok(&p, "cflow run .cflow, cache unusable"));
    tu_proc_free(&p);
}

int main(void)
{
    const char *base = tu_tmp("xdg-cache");
    setenv("XDG_CACHE_HOME", base, 1);
    snprintf(cache, sizeof cache, "%s/cflow", base);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_runs_as_converted),
        cmocka_unit_test(test_changed_and_corrupt),
        cmocka_unit_test(test_models_list_and_free),
        cmocka_unit_test(test_two_at_once),
        cmocka_unit_test(test_unwritable_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
