/*
 * test_family_refuse.c — issue 42, item 1: a value of a model family that
 * cflow does not implement is refused in one line naming the key and the
 * value, by the Hugging Face and the GGUF readers alike.
 *
 * The Hugging Face cases are the families' tiny folders
 * (tests/data/families) with one key of config.json changed: the folder
 * is remade in a scratch directory, its config.json rewritten and its
 * safetensors and tokenizer linked.  The GGUF case is `cflow synth --gguf
 * tiny-deepseek2` with one u32 value changed in place (a GGUF key/value is
 * the key's length and bytes, the u32 type 4, then the value).
 */
#include "config.h"

#include "src_test.h"

#include <errno.h>
#include <limits.h>

/* The family folder fam with the first `from` of its config.json replaced
 * by `to`, in a scratch directory named name; its path. */
static const char *variant(const char *fam, const char *name, const char *from, const char *to)
{
    const char *src = getenv("CFLOW_SRCDIR");
    static char dir[4096];
    char path[8192], in[4096];
    snprintf(dir, sizeof dir, "%s", tu_tmp(name));
    assert_int_equal(mkdir(dir, 0755) == 0 || errno == EEXIST, 1);
    snprintf(in, sizeof in, "%s/tests/data/families/%s-tiny-hf", src ? src : ".", fam);
    static const char *const link_these[] = { "model.safetensors", "tokenizer.json" };
    for (size_t i = 0; i < 2; i++) {
        char from_p[4096 + 32], to_p[4096 + 32];
        snprintf(from_p, sizeof from_p, "%s/%s", in, link_these[i]);
        snprintf(to_p, sizeof to_p, "%s/%s", dir, link_these[i]);
        unlink(to_p);
        char abs[PATH_MAX];
        assert_non_null(realpath(from_p, abs));
        assert_int_equal(symlink(abs, to_p), 0);
    }
    snprintf(path, sizeof path, "%s/config.json", in);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char cfg[65536];
    size_t n = fread(cfg, 1, sizeof cfg - 1, f);
    fclose(f);
    cfg[n] = '\0';
    char *at = strstr(cfg, from);
    if (!at)
        fail_msg("%s: no '%s' in config.json", fam, from);
    snprintf(path, sizeof path, "%s/config.json", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(cfg, 1, (size_t)(at - cfg), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    return dir;
}

static void test_hf(void **state)
{
    (void)state;
    static const struct {
        const char *fam, *from, *to, *names;
        int         rc;
    } c[] = {
        { "olmoe", "\"clip_qkv\": null", "\"clip_qkv\": 8.0", "clip_qkv 8", FMT_EUNSUP },
        { "gemma2", "\"hidden_activation\": \"gelu_pytorch_tanh\"",
          "\"hidden_activation\": \"relu\"", "hidden_activation relu", FMT_EUNSUP },
        { "gemma3", "\"rope_local_base_freq\"", "\"attn_logit_softcapping\": 50.0, "
          "\"rope_local_base_freq\"", "attn_logit_softcapping 50", FMT_EUNSUP },
        { "phi3", "\"type\": \"longrope\"", "\"type\": \"dynamic\"",
          "rope_scaling type dynamic", FMT_EUNSUP },
        { "gptoss", "\"swiglu_limit\": 7.0", "\"swiglu_limit\": 7.0, \"quantization_config\": "
          "{\"quant_method\": \"mxfp4\"}", "quantization_config", FMT_EUNSUP },
        { "deepseek2", "\"scoring_func\": \"softmax\"", "\"scoring_func\": \"sigmoid\"",
          "scoring_func sigmoid", FMT_EUNSUP },
        { "deepseek2", "\"kv_lora_rank\": 128", "\"kv_lora_rank\": 96",
          "latent attention of rank 96", FMT_EUNSUP },
        { "deepseek2", "\"n_group\": 2", "\"n_group\": 3", "3 expert groups", FMT_EUNSUP },
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char name[32];
        snprintf(name, sizeof name, "refuse-%zu", i);
        const char *dir = variant(c[i].fam, name, c[i].from, c[i].to);
        fmt_src *s = NULL;
        char err[512] = "";
        int rc = fmt_src_open(&s, dir, NULL, err, sizeof err);
        print_message("%s (%s): %s\n", c[i].fam, c[i].to, err);
        if (rc >= 0)
            fmt_src_close(s);
        assert_true(rc < 0);
        assert_null(strchr(err, '\n'));
        if (!strstr(err, c[i].names))
            fail_msg("%s: message '%s' lacks '%s'", c[i].fam, err, c[i].names);
    }
}

/* A u32 GGUF key of file path set to v. */
static void gguf_set_u32(const char *path, const char *key, uint32_t v)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    static uint8_t head[1 << 20];
    size_t n = fread(head, 1, sizeof head, f);
    uint8_t *at = memmem(head, n, key, strlen(key));
    assert_non_null(at);
    uint32_t ty;
    memcpy(&ty, at + strlen(key), 4);
    assert_int_equal(ty, 4);
    assert_int_equal(fseek(f, (long)(at - head) + (long)strlen(key) + 4, SEEK_SET), 0);
    assert_int_equal(fwrite(&v, 4, 1, f), 1);
    fclose(f);
}

static void test_gguf(void **state)
{
    (void)state;
    tu_proc p;
    const char *g = tu_tmp("ds-refuse.gguf");
    char path[4096];
    snprintf(path, sizeof path, "%s", g);
    assert_int_equal(tu_cflow_run(&p, "synth", "--gguf", "tiny-deepseek2", path, (char *)NULL),
                     0);
    assert_true(tu_ok(&p, "synth"));
    tu_proc_free(&p);
    fmt_src *s = open_ok(path, NULL);
    fmt_src_close(s);
    gguf_set_u32(path, "deepseek2.expert_gating_func", 2);   /* sigmoid */
    open_fails(path, NULL, FMT_EUNSUP, "deepseek2.expert_gating_func 2");
    gguf_set_u32(path, "deepseek2.expert_gating_func", 1);
    gguf_set_u32(path, "deepseek2.attention.key_length_mla", 0);
    open_fails(path, NULL, FMT_EUNSUP, "key_length_mla 0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf),
        cmocka_unit_test(test_gguf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
