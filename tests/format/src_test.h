/*
 * src_test.h — what test_src.c (llama2.c checkpoints, GGUF) and
 * test_src_hf.c (Hugging Face directories) share: opening a source model
 * through fmt_src, and the one-line refusal it must give.
 */
#ifndef CFLOW_SRC_TEST_H
#define CFLOW_SRC_TEST_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/cflow_format.h"
#include "testutil.h"

/* path (with tokenizer tok, NULL: none) opened; fails the test otherwise. */
static inline fmt_src *open_ok(const char *path, const char *tok)
{
    fmt_src *s = NULL;
    char err[512] = "";
    int rc = fmt_src_open(&s, path, tok, err, sizeof err);
    if (rc != FMT_OK)
        fail_msg("%s: rc %d: %s", path, rc, err);
    assert_non_null(s);
    return s;
}

/* Open must fail with rc; the message is one line naming `names`. */
static inline void open_fails(const char *path, const char *tok, int rc_want,
                       const char *names)
{
    fmt_src *s = NULL;
    char err[512] = "";
    int rc = fmt_src_open(&s, path, tok, err, sizeof err);
    if (rc != rc_want)
        fail_msg("%s: rc %d, expected %d (%s)", path, rc, rc_want, err);
    assert_null(s);
    assert_null(strchr(err, '\n'));
    if (names && !strstr(err, names))
        fail_msg("%s: message '%s' lacks '%s'", path, err, names);
}

#endif
