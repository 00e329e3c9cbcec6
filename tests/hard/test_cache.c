/*
 * test_cache.c — the model cache ($XDG_CACHE_HOME/cflow) against damage,
 * symlinks and interruptions (issue 44, class 2), through the real binary.
 * Every case ends with a start that must give the fault-free tokens of
 * the GGUF (stories260K-q8_0 from the shared folder):
 *
 *   - an entry truncated by hand after its sidecar was removed: it was
 *     taken as complete by its hash (the run failed on it, and the
 *     "best effort" sidecar then recorded the damage for good); now an
 *     entry without a sidecar is converted again;
 *   - an entry edited by hand whose mtime was put back (touch -r): it
 *     was taken as complete (size and mtime agreed); the sidecar now also
 *     records the entry's ctime, which no call sets back;
 *   - a symlink named like an entry, pointing outside the cache (at a
 *     file, at a folder): `cflow models` listed it as a conversion
 *     (following it for its size); now it is no entry: not listed, not
 *     opened, and list, rm, prune and clear never touch what it points at;
 *   - names that are not entries ("..", "/", ".lock", a path) given to
 *     `cflow models rm`: refused, exit 1, nothing removed;
 *   - a conversion killed (SIGKILL, SIGTERM, SIGINT) at 24 moments from
 *     its start to its end: the next start converts or reuses a complete
 *     entry, never a partial one (the same tokens), and no temporary file
 *     outlives the next conversion.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hard.h"

static char g_gguf[4096], g_xdg[4200], g_dir[4200], g_ref[256];

/* cflow run of the GGUF with the cache in g_xdg: 8 greedy tokens. */
static void run_gguf(tu_proc *p)
{
    char *argv[] = { (char *)tu_cflow(), "run", "-m", g_gguf, "-p", "Once upon", "-n", "8",
                     "--temp", "0", "--no-log", NULL };
    char *env[] = { g_xdg, NULL };
    assert_int_equal(tu_run(p, argv, env, 60), 0);
}

static void models(tu_proc *p, const char *a, const char *b)
{
    char *argv[] = { (char *)tu_cflow(), "models", (char *)a, (char *)b, NULL };
    char *env[] = { g_xdg, NULL };
    assert_int_equal(tu_run(p, argv, env, 60), 0);
}

/* A start that gives the reference tokens; 1 when it converted. */
static int start_ok(const char *what)
{
    tu_proc p;
    run_gguf(&p);
    if (!tu_ok(&p, what))
        fail_msg("%s failed", what);
    assert_string_equal(p.out, g_ref);
    int conv = strstr(p.err, "cflow: converted ") != NULL;
    tu_proc_free(&p);
    return conv;
}

/* Each case starts from an empty cache. */
static int fresh(void **state)
{
    (void)state;
    tu_proc p;
    models(&p, "clear", NULL);
    assert_true(tu_ok(&p, "models clear"));
    tu_proc_free(&p);
    return 0;
}

/* The cache's one entry (its .cflow path) into out; fails unless one. */
static void the_entry(char *out, size_t n)
{
    DIR *d = opendir(g_dir);
    struct dirent *de;
    int k = 0;
    assert_non_null(d);
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 6 && !strcmp(de->d_name + l - 6, ".cflow")) {
            snprintf(out, n, "%s/%s", g_dir, de->d_name);
            k++;
        }
    }
    closedir(d);
    assert_int_equal(k, 1);
}

static int setup(void **state)
{
    (void)state;
    const char *src = tu_shared("models/stories260K-q8_0.gguf");
    tu_require(src);
    snprintf(g_gguf, sizeof g_gguf, "%s", tu_tmp("src.gguf"));
    assert_int_equal(hard_copy(src, g_gguf), 0);
    snprintf(g_xdg, sizeof g_xdg, "XDG_CACHE_HOME=%s", tu_tmp("xdg"));
    snprintf(g_dir, sizeof g_dir, "%s/cflow", tu_tmp("xdg"));
    tu_proc p;
    char *argv[] = { (char *)tu_cflow(), "run", "-m", g_gguf, "-p", "Once upon", "-n", "8",
                     "--temp", "0", "--no-log", NULL };
    char *env[] = { g_xdg, NULL };
    assert_int_equal(tu_run(&p, argv, env, 60), 0);
    assert_true(tu_ok(&p, "the first start"));
    assert_true(p.out_len > 0 && p.out_len < sizeof g_ref);
    snprintf(g_ref, sizeof g_ref, "%s", p.out);
    tu_proc_free(&p);
    return 0;
}

static void test_truncated_without_sidecar(void **state)
{
    (void)state;
    char cflow[4300], side[4300];
    start_ok("a start");
    the_entry(cflow, sizeof cflow);
    snprintf(side, sizeof side, "%.*s.json", (int)(strlen(cflow) - 6), cflow);
    assert_int_equal(unlink(side), 0);
    assert_int_equal(truncate(cflow, 200000), 0);
    assert_int_equal(start_ok("a start over a truncated entry without sidecar"), 1);
    assert_int_equal(start_ok("the start after it"), 0);   /* whole again, and reused */
}

static void test_edited_mtime_restored(void **state)
{
    (void)state;
    char cflow[4300];
    start_ok("a start");
    the_entry(cflow, sizeof cflow);
    struct stat st;
    assert_int_equal(stat(cflow, &st), 0);
    /* a byte of the output head's last tile flipped: a different model */
    size_t len;
    uint8_t *b = tu_slurp(cflow, &len);
    b[len - 4096] ^= 0x40;
    tu_spit(cflow, b, len);
    free(b);
    struct timespec ts[2] = { st.st_atim, st.st_mtim };
    assert_int_equal(utimensat(AT_FDCWD, cflow, ts, 0), 0);
    assert_int_equal(start_ok("a start over an entry edited with its mtime put back"), 1);
    assert_int_equal(start_ok("the start after it"), 0);
}

static void test_symlinks(void **state)
{
    (void)state;
    char victim[4096], vdir[4096], link[4300], dlink[4300], side[4300];
    snprintf(victim, sizeof victim, "%s", tu_tmp("victim.cflow"));
    snprintf(vdir, sizeof vdir, "%s", tu_tmp("victim-dir"));
    assert_int_equal(tu_write_file(victim, "precious", 8), 0);
    assert_int_equal(mkdir(vdir, 0700), 0);
    start_ok("a start");
    snprintf(link, sizeof link, "%s/evil-0123456789abcdef.cflow", g_dir);
    snprintf(side, sizeof side, "%s/evil-0123456789abcdef.json", g_dir);
    snprintf(dlink, sizeof dlink, "%s/dir-0123456789abcdee.cflow", g_dir);
    assert_int_equal(symlink(victim, link), 0);
    assert_int_equal(symlink(victim, side), 0);
    assert_int_equal(symlink(vdir, dlink), 0);
    tu_proc p;
    models(&p, NULL, NULL);
    assert_true(tu_ok(&p, "models list"));
    assert_null(strstr(p.out, "evil-"));
    assert_null(strstr(p.out, "dir-"));
    assert_non_null(strstr(p.out, "1 conversion,"));
    tu_proc_free(&p);
    models(&p, "rm", "evil-0123456789abcdef");
    assert_int_equal(p.status, 1);
    tu_proc_free(&p);
    models(&p, "prune", NULL);
    assert_true(tu_ok(&p, "models prune"));
    tu_proc_free(&p);
    models(&p, "clear", NULL);
    assert_true(tu_ok(&p, "models clear"));
    tu_proc_free(&p);
    size_t len;
    char *v = tu_read_file(victim, &len);
    assert_non_null(v);
    assert_int_equal(len, 8);
    assert_memory_equal(v, "precious", 8);
    free(v);
    struct stat st;
    assert_int_equal(stat(vdir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(start_ok("a start beside the symlinks"), 1);   /* clear removed it */
    unlink(link);
    unlink(side);
    unlink(dlink);
}

static void test_rm_refuses(void **state)
{
    (void)state;
    static const char *const names[] = { "..", "/", ".", ".lock", "*", "../xdg", "/etc/passwd",
                                         "" };
    start_ok("a start");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        tu_proc p;
        models(&p, "rm", names[i]);
        assert_int_equal(p.status, 1);
        assert_int_equal(tu_count_lines(p.err), 1);
        tu_proc_free(&p);
    }
    assert_int_equal(start_ok("a start after the refused rm"), 0);
    assert_int_equal(access("/etc/passwd", F_OK), 0);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void test_killed_conversions(void **state)
{
    (void)state;
    tu_proc p;
    /* how long a conversion start takes here */
    double t0 = now_s();
    assert_int_equal(start_ok("a timed start"), 1);
    double span = now_s() - t0;
    static const int sigs[] = { SIGKILL, SIGTERM, SIGINT };
    int converted = 0;
    for (int i = 0; i < 24; i++) {
        models(&p, "clear", NULL);
        tu_proc_free(&p);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int n = open("/dev/null", O_RDWR);
            dup2(n, 1);
            dup2(n, 2);
            putenv(g_xdg);
            execl(tu_cflow(), tu_cflow(), "run", "-m", g_gguf, "-p", "Once upon", "-n", "8",
                  "--temp", "0", "--no-log", (char *)NULL);
            _exit(127);
        }
        usleep((useconds_t)(span * 1e6 * i / 20));
        kill(pid, sigs[i % 3]);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        converted += start_ok("the start after a killed one");
        assert_int_equal(hard_dir_count(g_dir, ".tmp."), 0);
    }
    print_message("conversions killed at 24 moments of %.1f ms: %d next starts converted\n",
                  span * 1e3, converted);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_truncated_without_sidecar, fresh),
        cmocka_unit_test_setup(test_edited_mtime_restored, fresh),
        cmocka_unit_test_setup(test_symlinks, fresh),
        cmocka_unit_test_setup(test_rm_refuses, fresh),
        cmocka_unit_test_setup(test_killed_conversions, fresh),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
