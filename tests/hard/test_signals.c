/*
 * test_signals.c — signals and pipes (issue 44, class 4) through the real
 * `cflow`:
 *
 *   - `cflow run ... | head -c 10`: the reader leaves after 10 bytes.  It
 *     died of SIGPIPE with its run "running" in the log; now the run stops
 *     between two tokens ("stopped by the output's reader leaving"), its
 *     statistics and run log row are written ("done"), and it exits 141,
 *     the status a shell reports for SIGPIPE (man/cflow.1, EXIT STATUS);
 *   - SIGTERM in the middle of a run: it died at once with its run
 *     "running"; now it stops as Ctrl-C does, logs the run, exits 143;
 *   - stdout closed (`cflow run >&-`): the text was lost and the exit
 *     status 0 (its descriptor was reused by an eventfd); now one line
 *     "cflow: standard output: Bad file descriptor" and exit 1, as for any
 *     command (`cflow inspect >&-`), and a full stdout (/dev/full) too;
 *   - stderr closed (`2>&-`): the same tokens, exit 0, and a conversion
 *     into the model cache made meanwhile is the same file as with stderr
 *     open (no message can land in a file that took descriptor 2);
 *   - SIGINT, SIGTERM and SIGKILL during `cflow convert` and `cflow synth`,
 *     at several moments: no output file and no temporary file is left.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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

/* Start cflow with argv; its stdout a pipe (*out), stderr the file err,
 * stdin /dev/null; with close_stdout, stdout closed instead. */
static pid_t start(char *const argv[], int *out, const char *err, int close_stdout)
{
    int pp[2];
    assert_int_equal(pipe(pp), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644), n = open("/dev/null", O_RDONLY);
        dup2(n, 0);
        dup2(e, 2);
        if (close_stdout)
            close(1);
        else
            dup2(pp[1], 1);
        close(pp[0]);
        close(pp[1]);
        close(e);
        close(n);
        putenv("CFLOW_READ_BW_GBS=10");
        execv(argv[0], argv);
        _exit(127);
    }
    close(pp[1]);
    *out = pp[0];
    return pid;
}

/* Read up to n bytes from fd (60 s at most); the count. */
static size_t read_some(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, 60000) <= 0)
            break;
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

static int wait_status(pid_t pid, int *signaled)
{
    int st;
    for (int i = 0; i < 6000; i++) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            *signaled = WIFSIGNALED(st);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    fail_msg("cflow did not end within 60 s");
    return -1;
}

static void test_reader_leaves(void **state)
{
    (void)state;
    char db[4096], err[4096], buf[16];
    snprintf(db, sizeof db, "%s", tu_tmp("pipe.db"));
    snprintf(err, sizeof err, "%s", tu_tmp("pipe.err"));
    char *argv[] = { (char *)tu_cflow(), "run", "-m", (char *)hard_default_model(), "-n", "0",
                     "--ignore-eos", "--db", db, NULL };
    int out, sig;
    pid_t pid = start(argv, &out, err, 0);
    assert_int_equal(read_some(out, buf, 10), 10);
    close(out);                                    /* head -c 10 */
    int status = wait_status(pid, &sig);
    char *e = tu_read_file(err, NULL);
    assert_non_null(e);
    print_message("reader left: status %d%s\n", status, sig ? " (signal)" : "");
    assert_false(sig);
    assert_int_equal(status, 128 + SIGPIPE);
    assert_non_null(strstr(e, "cflow: stopped by the output's reader leaving after"));
    assert_non_null(strstr(e, "cflow: logged run 1 in"));
    free(e);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run WHERE status = 'done' AND"
                                   " n_gen > 0"), 1);
}

static void test_sigterm(void **state)
{
    (void)state;
    char db[4096], err[4096], buf[64];
    snprintf(db, sizeof db, "%s", tu_tmp("term.db"));
    snprintf(err, sizeof err, "%s", tu_tmp("term.err"));
    char *argv[] = { (char *)tu_cflow(), "run", "-m", (char *)hard_default_model(), "-n", "0",
                     "--ignore-eos", "--db", db, NULL };
    int out, sig;
    pid_t pid = start(argv, &out, err, 0);
    assert_int_equal(read_some(out, buf, sizeof buf), sizeof buf);   /* generating */
    kill(pid, SIGTERM);
    while (read(out, buf, sizeof buf) > 0)   /* drain to the end */
        ;
    close(out);
    int status = wait_status(pid, &sig);
    char *e = tu_read_file(err, NULL);
    assert_non_null(e);
    assert_false(sig);
    assert_int_equal(status, 128 + SIGTERM);
    assert_non_null(strstr(e, "cflow: stopped by SIGTERM after"));
    free(e);
    assert_int_equal(tu_db_int(db, "SELECT count(*) FROM run WHERE status = 'done' AND"
                                   " n_gen > 0"), 1);
}

static void test_closed_stdout(void **state)
{
    (void)state;
    char err[4096];
    snprintf(err, sizeof err, "%s", tu_tmp("closed.err"));
    const char *model = hard_default_model();
    char *const cmds[][8] = {
        { (char *)tu_cflow(), "run", "-m", (char *)model, "-n", "8", "--no-log", NULL },
        { (char *)tu_cflow(), "inspect", (char *)model, NULL },
        { (char *)tu_cflow(), "models", "dir", NULL },
    };
    for (size_t i = 0; i < 3; i++) {
        int out, sig;
        pid_t pid = start(cmds[i], &out, err, 1);
        close(out);
        int status = wait_status(pid, &sig);
        char *e = tu_read_file(err, NULL);
        assert_non_null(e);
        if (status != 1 || !strstr(e, "cflow: standard output: Bad file descriptor\n"))
            fail_msg("cflow %s with stdout closed: status %d, stderr:\n%s", cmds[i][1], status,
                     e);
        free(e);
    }
    /* a full stdout */
    char *argv[] = { "/bin/sh", "-c", "\"$0\" run -m \"$1\" -n 8 --no-log >/dev/full",
                     (char *)tu_cflow(), (char *)model, NULL };
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 60), 0);
    assert_int_equal(p.status, 1);
    assert_non_null(strstr(p.err, "cflow: standard output: No space left on device\n"));
    tu_proc_free(&p);
}

static void test_closed_stderr(void **state)
{
    (void)state;
    const char *gguf = tu_shared("models/stories260K-q8_0.gguf");
    tu_require(gguf);
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s", tu_tmp("xdg-a"));
    snprintf(b, sizeof b, "%s", tu_tmp("xdg-b"));
    char *argv[] = { "/bin/sh", "-c",
                     "XDG_CACHE_HOME=\"$2\" \"$0\" run -m \"$1\" -p Once -n 12 --temp 0 --no-log"
                     " 2>&- && XDG_CACHE_HOME=\"$3\" \"$0\" run -m \"$1\" -p Once -n 12 --temp 0"
                     " --no-log 2>/dev/null && cmp \"$2\"/cflow/*.cflow \"$3\"/cflow/*.cflow >&2",
                     (char *)tu_cflow(), (char *)gguf, a, b, NULL };
    tu_proc p;
    assert_int_equal(tu_run(&p, argv, NULL, 60), 0);
    assert_true(tu_ok(&p, "two runs, stderr closed in the first"));
    /* the same text twice */
    size_t half = p.out_len / 2;
    assert_true(half > 0);
    assert_memory_equal(p.out, p.out + half, half);
    tu_proc_free(&p);
}

static void test_interrupted_writers(void **state)
{
    (void)state;
    const char *gguf = tu_shared("models/stories260K-q8_0.gguf");
    tu_require(gguf);
    char dir[4096], out[4200], src[4200];
    snprintf(dir, sizeof dir, "%s", tu_tmp("writers"));
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(src, sizeof src, "%s/src.gguf", dir);
    assert_int_equal(hard_copy(gguf, src), 0);
    static const int sigs[] = { SIGINT, SIGTERM, SIGKILL };
    for (int w = 0; w < 2; w++) {
        snprintf(out, sizeof out, "%s/out.cflow", dir);
        for (int i = 0; i < 12; i++) {
            char *conv[] = { (char *)tu_cflow(), "convert", "-q", "q4_0", src, out, NULL };
            char *syn[] = { (char *)tu_cflow(), "synth", "tiny-olmoe", out, NULL };
            int fd, sig;
            char err[4200];
            snprintf(err, sizeof err, "%s.err", dir);
            pid_t pid = start(w ? syn : conv, &fd, err, 0);
            usleep((useconds_t)(2000 * i));
            kill(pid, sigs[i % 3]);
            close(fd);
            wait_status(pid, &sig);
            /* a complete output may exist (it finished first); nothing else */
            unlink(out);
            assert_int_equal(hard_dir_count(dir, NULL), 1);   /* src.gguf alone */
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader_leaves),
        cmocka_unit_test(test_sigterm),
        cmocka_unit_test(test_closed_stdout),
        cmocka_unit_test(test_closed_stderr),
        cmocka_unit_test(test_interrupted_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
