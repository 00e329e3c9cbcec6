/*
 * tok_test.h — what the tokenizer tests share.  test_tok.c (llama.cpp's
 * vectors through GGUF vocabularies, llama2.c's tokenizer.bin, the
 * streaming detokeniser, special tokens, bounds, bad files, and the
 * table), test_tok_hf.c (Hugging Face tokenizer files) and tok_test.c (the
 * helpers below) build one program, test_tok.
 */
#ifndef CFLOW_TOK_TEST_H
#define CFLOW_TOK_TEST_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "engine/engine.h"
#include "format/cflow_format.h"
#include "testutil.h"

/* text [len] encoded into a malloc'd array of *n ids (the retry with a
 * larger buffer checked on the way). */
int32_t *tt_encode(const eng_tok *t, const char *s, size_t len, int add,
                   int parse, size_t *n);
/* Every string of the vectors file inp against its line of ids in out
 * (llama.cpp's test-tokenizer-0 layout, the file's essay in test_tok.c). */
void tt_run_vectors(const char *name, const eng_tok *t, const char *inp,
                    const char *outp);
/* A tokenizer from a shared GGUF (rel under shared/), its file in *g. */
eng_tok *tt_load_gguf_tok(const char *rel, fmt_gguf **g);
/* A tokenizer from a vocabulary file or folder fmt_vocab_load reads; its
 * metadata in *kvp (NULL: freed). */
eng_tok *tt_load_vocab_tok(const char *path, fmt_kv **kvp);
/* The string value of key in kv is want; fails the test otherwise. */
void tt_assert_kv_str(const fmt_kv *kv, const char *key, const char *want);
/* A fresh folder under /tmp (one at a time: the name is static), its
 * files removed with it by tt_rm_dir; text written to dir/name. */
const char *tt_tmpdir(void);
void tt_rm_dir(const char *dir, const char *const *names);
void tt_write_text(const char *dir, const char *name, const char *text);

/* test_tok_hf.c */
void test_vocab_qwen2_hf(void **st);
void test_vocab_qwen2_tokenizer_json(void **st);
void test_vocab_spm_tokenizer_json(void **st);

#endif
