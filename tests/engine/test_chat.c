/*
 * test_chat.c — chat templates: exact renderings, detection from real
 * Jinja templates, and the name <-> enum round trip.
 *
 * The conversation and most expected strings are llama.cpp's own
 * (tests/test-chat-template.cpp, which checks src/llama-chat.cpp).
 * test_llamacpp_recorded compares every family with what llama.cpp's
 * llama_chat_apply_template printed for the same conversation, recorded in
 * tests/data/chat (its README says how); tinyllama has no llama.cpp family.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/engine.h"
#include "format/cflow_format.h"

#include <stdio.h>

/* llama.cpp's test conversation: system, then user/assistant turns, the
 * second assistant answer padded with spaces (trimmed by some families). */
static const eng_msg conv[] = {
    { "system", "You are a helpful assistant" },
    { "user", "Hello" },
    { "assistant", "Hi there" },
    { "user", "Who are you" },
    { "assistant", "   I am an assistant   " },
    { "user", "Another question" },
};
#define NCONV (sizeof conv / sizeof conv[0])

static void expect_render(enum eng_chat c, const eng_msg *m, size_t n,
                          int add_ass, const char *want)
{
    char *out = (char *)1;
    int rc = eng_chat_render(c, m, n, add_ass, &out);
    assert_int_equal(rc, 0);
    assert_non_null(out);
    if (strcmp(out, want) != 0)
        fail_msg("template %s:\n--- want\n%s\n--- got\n%s\n---",
                 eng_chat_name(c), want, out);
    free(out);
}

/* ------------------------------------------------------------ rendering */

static void test_render_chatml(void **state)
{
    (void)state;
    expect_render(ENG_CHAT_CHATML, conv, NCONV, 1,
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
        "<|im_start|>user\nHello<|im_end|>\n"
        "<|im_start|>assistant\nHi there<|im_end|>\n"
        "<|im_start|>user\nWho are you<|im_end|>\n"
        "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
        "<|im_start|>user\nAnother question<|im_end|>\n"
        "<|im_start|>assistant\n");
    /* system + user + assistant + user, no opener */
    expect_render(ENG_CHAT_CHATML, conv, 4, 0,
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
        "<|im_start|>user\nHello<|im_end|>\n"
        "<|im_start|>assistant\nHi there<|im_end|>\n"
        "<|im_start|>user\nWho are you<|im_end|>\n");
}

static void test_render_llama2(void **state)
{
    (void)state;
    /* llama.cpp "llama2-sys-bos" (TheBloke/FusionNet test case). */
    expect_render(ENG_CHAT_LLAMA2, conv, NCONV, 1,
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"
        "Hello [/INST]Hi there</s>"
        "<s>[INST] Who are you [/INST]   I am an assistant   </s>"
        "<s>[INST] Another question [/INST]");
    expect_render(ENG_CHAT_LLAMA2, conv, 4, 0,
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"
        "Hello [/INST]Hi there</s><s>[INST] Who are you [/INST]");
    /* without a system message */
    expect_render(ENG_CHAT_LLAMA2, conv + 1, 3, 1,
        "[INST] Hello [/INST]Hi there</s><s>[INST] Who are you [/INST]");
}

static void test_render_llama3(void **state)
{
    (void)state;
    expect_render(ENG_CHAT_LLAMA3, conv, NCONV, 1,
        "<|start_header_id|>system<|end_header_id|>\n\n"
        "You are a helpful assistant<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
        "I am an assistant<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n"
        "Another question<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect_render(ENG_CHAT_LLAMA3, conv, 4, 0,
        "<|start_header_id|>system<|end_header_id|>\n\n"
        "You are a helpful assistant<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>");
}

static void test_render_zephyr(void **state)
{
    (void)state;
    /* llama.cpp "zephyr" (stablelm-2-zephyr's literal "<|endoftext|>") */
    expect_render(ENG_CHAT_ZEPHYR, conv, NCONV, 1,
        "<|system|>\nYou are a helpful assistant<|endoftext|>\n"
        "<|user|>\nHello<|endoftext|>\n"
        "<|assistant|>\nHi there<|endoftext|>\n"
        "<|user|>\nWho are you<|endoftext|>\n"
        "<|assistant|>\n   I am an assistant   <|endoftext|>\n"
        "<|user|>\nAnother question<|endoftext|>\n"
        "<|assistant|>\n");
    /* the same shape with the Llama vocabulary's "</s>" */
    expect_render(ENG_CHAT_TINYLLAMA, conv, 4, 0,
        "<|system|>\nYou are a helpful assistant</s>\n"
        "<|user|>\nHello</s>\n"
        "<|assistant|>\nHi there</s>\n"
        "<|user|>\nWho are you</s>\n");
}

static void test_render_mistral(void **state)
{
    (void)state;
    /* llama.cpp "mistral-v7" (Mistral-Large-Instruct-2411 test case). */
    expect_render(ENG_CHAT_MISTRAL, conv, NCONV, 1,
        "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT]"
        "[INST] Hello[/INST] Hi there</s>"
        "[INST] Who are you[/INST]    I am an assistant   </s>"
        "[INST] Another question[/INST]");
    expect_render(ENG_CHAT_MISTRAL, conv, 4, 0,
        "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT]"
        "[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]");
}

static void test_render_gemma(void **state)
{
    (void)state;
    expect_render(ENG_CHAT_GEMMA, conv, NCONV, 1,
        "<start_of_turn>user\nYou are a helpful assistant\n\n"
        "Hello<end_of_turn>\n"
        "<start_of_turn>model\nHi there<end_of_turn>\n"
        "<start_of_turn>user\nWho are you<end_of_turn>\n"
        "<start_of_turn>model\nI am an assistant<end_of_turn>\n"
        "<start_of_turn>user\nAnother question<end_of_turn>\n"
        "<start_of_turn>model\n");
    expect_render(ENG_CHAT_GEMMA, conv, 4, 0,
        "<start_of_turn>user\nYou are a helpful assistant\n\n"
        "Hello<end_of_turn>\n"
        "<start_of_turn>model\nHi there<end_of_turn>\n"
        "<start_of_turn>user\nWho are you<end_of_turn>\n");
    /* system text is trimmed and waits for the next user turn */
    {
        const eng_msg m[] = {
            { "system", "  Be brief.\n" },
            { "assistant", "Ready." },
            { "user", "Hi" },
        };
        expect_render(ENG_CHAT_GEMMA, m, 3, 1,
            "<start_of_turn>model\nReady.<end_of_turn>\n"
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
            "<start_of_turn>model\n");
    }
}

static void test_render_phi3(void **state)
{
    (void)state;
    expect_render(ENG_CHAT_PHI3, conv, NCONV, 1,
        "<|system|>\nYou are a helpful assistant<|end|>\n"
        "<|user|>\nHello<|end|>\n"
        "<|assistant|>\nHi there<|end|>\n"
        "<|user|>\nWho are you<|end|>\n"
        "<|assistant|>\n   I am an assistant   <|end|>\n"
        "<|user|>\nAnother question<|end|>\n"
        "<|assistant|>\n");
    expect_render(ENG_CHAT_PHI3, conv, 4, 0,
        "<|system|>\nYou are a helpful assistant<|end|>\n"
        "<|user|>\nHello<|end|>\n"
        "<|assistant|>\nHi there<|end|>\n"
        "<|user|>\nWho are you<|end|>\n");
}

static void test_render_none(void **state)
{
    (void)state;
    expect_render(ENG_CHAT_NONE, conv, 4, 1,
        "You are a helpful assistant\n\nHelloHi thereWho are you");
    /* no system prompt: just the text (completion mode) */
    {
        const eng_msg m[] = { { "user", "Once upon a time" } };
        expect_render(ENG_CHAT_NONE, m, 1, 1, "Once upon a time");
    }
    /* a system message that is not first still comes first */
    {
        const eng_msg m[] = {
            { "user", "Tell me." },
            { "system", "Sys" },
        };
        expect_render(ENG_CHAT_NONE, m, 2, 0, "Sys\n\nTell me.");
    }
}

static void test_render_edges(void **state)
{
    char *out = (char *)1;
    int c;
    (void)state;
    /* no messages: empty string (or only the opener) */
    for (c = 0; c < ENG_NCHAT; c++) {
        assert_int_equal(eng_chat_render((enum eng_chat)c, NULL, 0, 0, &out), 0);
        assert_non_null(out);
        if (c == ENG_CHAT_LLAMA2)
            assert_string_equal(out, "[INST] ");   /* llama.cpp's prefix */
        else
            assert_string_equal(out, "");
        free(out);
    }
    expect_render(ENG_CHAT_CHATML, NULL, 0, 1, "<|im_start|>assistant\n");
    /* NULL role/content are tolerated (user, empty) */
    {
        const eng_msg m[] = { { NULL, NULL }, { "user", "x" } };
        expect_render(ENG_CHAT_CHATML, m, 2, 0,
            "<|im_start|>user\n<|im_end|>\n<|im_start|>user\nx<|im_end|>\n");
    }
    /* bad arguments */
    out = (char *)1;
    assert_int_equal(eng_chat_render(ENG_NCHAT, conv, 1, 0, &out), ENG_EARG);
    assert_null(out);
    assert_int_equal(eng_chat_render((enum eng_chat)-1, conv, 1, 0, &out),
                     ENG_EARG);
    assert_int_equal(eng_chat_render(ENG_CHAT_CHATML, NULL, 2, 0, &out),
                     ENG_EARG);
    assert_int_equal(eng_chat_render(ENG_CHAT_CHATML, conv, 1, 0, NULL),
                     ENG_EARG);
    /* a long conversation grows the buffer correctly */
    {
        enum { N = 400 };
        eng_msg *m = malloc(N * sizeof *m);
        char big[1000];
        size_t i, want = 0;
        assert_non_null(m);
        memset(big, 'a', sizeof big - 1);
        big[sizeof big - 1] = '\0';
        for (i = 0; i < N; i++) {
            m[i].role = (i & 1) ? "assistant" : "user";
            m[i].content = big;
            want += strlen("<|im_start|>") + strlen(m[i].role) + 1 +
                    strlen(big) + strlen("<|im_end|>\n");
        }
        assert_int_equal(eng_chat_render(ENG_CHAT_CHATML, m, N, 0, &out), 0);
        assert_int_equal(strlen(out), want);
        assert_true(strstr(out, "<|im_start|>assistant\naaa") != NULL);
        free(out);
        free(m);
    }
}

/* ------------------------------------------------------------ detection */

struct det {
    const char   *what;
    const char   *jinja;
    enum eng_chat want;
};

/* Real templates (tokenizer.chat_template), most from llama.cpp's tests. */
static const struct det dets[] = {
    { "teknium/OpenHermes-2.5-Mistral-7B",
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
      ENG_CHAT_CHATML },
    { "Qwen2-Instruct",
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
      ENG_CHAT_CHATML },
    { "meta-llama/Llama-2-7b-chat-hf",
      "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
      ENG_CHAT_LLAMA2 },
    { "TheBloke/FusionNet_34Bx2_MoE-AWQ",
      "{%- for idx in range(0, messages|length) -%}\n{%- if messages[idx]['role'] == 'user' -%}\n{%- if idx > 1 -%}\n{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}\n{%- else -%}\n{{- messages[idx]['content'] + ' [/INST]' -}}\n{%- endif -%}\n{% elif messages[idx]['role'] == 'system' %}\n{{- '[INST] <<SYS>>\\n' + messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}\n{%- elif messages[idx]['role'] == 'assistant' -%}\n{{- ' '  + messages[idx]['content'] + ' ' + eos_token -}}\n{% endif %}\n{% endfor %}",
      ENG_CHAT_LLAMA2 },
    { "mistralai/Mistral-7B-Instruct-v0.2 (llama2 style)",
      "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
      ENG_CHAT_LLAMA2 },
    { "mistralai/Mistral-Large-Instruct-2411 (v7)",
      "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and assistant roles are supported!') }}{% endif %}{% endfor %}",
      ENG_CHAT_MISTRAL },
    { "Mistral v3 (tools block, no leading space)",
      "{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n        {%- if tools is not none and (message == user_messages[-1]) %}\n            {{- \"[AVAILABLE_TOOLS] [\" }}{%- endif %}\n            {{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}\n    {%- elif message[\"role\"] == \"assistant\" %}\n        {{- \" \" + message[\"content\"]|trim + eos_token}}\n    {%- endif %}\n{%- endfor %}\n",
      ENG_CHAT_MISTRAL },
    { "Mistral v1 (' [INST] ' + system_message)",
      "{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}\n            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- endif %}\n{%- endfor %}\n",
      ENG_CHAT_LLAMA2 },
    { "meta-llama/Meta-Llama-3-8B-Instruct",
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
      ENG_CHAT_LLAMA3 },
    { "google/gemma-7b-it",
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
      ENG_CHAT_GEMMA },
    { "Phi-3-mini",
      "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}",
      ENG_CHAT_PHI3 },
    { "Phi-3-small",
      "{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
      ENG_CHAT_PHI3 },
    { "HuggingFaceH4/zephyr-7b-beta / TinyLlama-1.1B-Chat-v1.0",
      "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
      ENG_CHAT_TINYLLAMA },
    { "zephyr with literal end markers",
      "{% for message in messages %}{% if message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|endoftext|>\n'}}{% else %}{{'<|' + message['role'] + '|>\n' + message['content'] + '<|endoftext|>\n'}}{% endif %}{% endfor %}",
      ENG_CHAT_ZEPHYR },
    { "zephyr with a literal </s>",
      "{% for m in messages %}{% if m['role'] == 'user' %}{{ '<|user|>\n' + m['content'] + '</s>\n' }}{% endif %}{% endfor %}",
      ENG_CHAT_TINYLLAMA },
    { "eachadea/vicuna-13b-1.1 (not a family we render)",
      "{%- for message in messages %}{%- if message['role'] == 'system' -%}{{- '' + message['content'] + '\n\n' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + message['content'] + '\n'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>\n' -}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{-'ASSISTANT:'-}}{%- endif -%}",
      ENG_CHAT_NONE },
    { "plain text", "hello world", ENG_CHAT_NONE },
    { "a template name", "gemma", ENG_CHAT_GEMMA },
    { "a llama.cpp template name", "mistral-v7", ENG_CHAT_MISTRAL },
};

static void test_detect(void **state)
{
    size_t i;
    (void)state;
    for (i = 0; i < sizeof dets / sizeof dets[0]; i++) {
        enum eng_chat got = eng_chat_detect(dets[i].jinja,
                                            strlen(dets[i].jinja));
        if (got != dets[i].want)
            fail_msg("%s: detected %s, want %s", dets[i].what,
                     eng_chat_name(got), eng_chat_name(dets[i].want));
    }
    assert_int_equal(eng_chat_detect(NULL, 0), ENG_CHAT_NONE);
    assert_int_equal(eng_chat_detect(NULL, 10), ENG_CHAT_NONE);
    assert_int_equal(eng_chat_detect("", 0), ENG_CHAT_NONE);
    assert_int_equal(eng_chat_detect("<|im_start|>", 0), ENG_CHAT_NONE);
}

/* The length bounds the search: text past len is not looked at, and the
 * text need not be NUL-terminated. */
static void test_detect_len(void **state)
{
    const char *s = "{{ x }}<|im_start|>";
    char buf[19];
    (void)state;
    assert_int_equal(eng_chat_detect(s, 7), ENG_CHAT_NONE);
    assert_int_equal(eng_chat_detect(s, strlen(s)), ENG_CHAT_CHATML);
    memcpy(buf, s, sizeof buf);          /* exactly 19 bytes, no NUL */
    assert_int_equal(eng_chat_detect(buf, sizeof buf), ENG_CHAT_CHATML);
    assert_int_equal(eng_chat_detect("chatmlX", 6), ENG_CHAT_CHATML);
}

/* ------------------------------------------------- llama.cpp recorded */

/* tests/data/chat/CASE.tmpl is what a model's tokenizer.chat_template holds
 * (a real model's Jinja text, or llama.cpp's name of the family) and
 * CASE.txt what llama.cpp's llama_chat_apply_template printed for conv with
 * add_ass true.  Each must be detected as its family and render the same
 * bytes. */
static const struct {
    const char   *name;
    enum eng_chat want;
} recorded[] = {
    { "chatml", ENG_CHAT_CHATML },
    { "chatml-openhermes", ENG_CHAT_CHATML },
    { "llama2-sys-bos", ENG_CHAT_LLAMA2 },
    { "llama2-fusionnet", ENG_CHAT_LLAMA2 },
    { "llama3", ENG_CHAT_LLAMA3 },
    { "llama3-meta", ENG_CHAT_LLAMA3 },
    { "zephyr", ENG_CHAT_ZEPHYR },
    { "mistral-v7", ENG_CHAT_MISTRAL },
    { "mistral-large-2411", ENG_CHAT_MISTRAL },
    { "gemma", ENG_CHAT_GEMMA },
    { "gemma-7b-it", ENG_CHAT_GEMMA },
    { "phi3", ENG_CHAT_PHI3 },
    { "phi3-mini", ENG_CHAT_PHI3 },
    /* the model families of issue 42 */
    { "gemma-2-2b-it", ENG_CHAT_GEMMA },
    { "phi-3.5-mini", ENG_CHAT_PHI3 },
    { "deepseek2", ENG_CHAT_DEEPSEEK2 },
    { "deepseek-v2", ENG_CHAT_DEEPSEEK2 },
    { "gpt-oss", ENG_CHAT_HARMONY },
    { "gpt-oss-120b", ENG_CHAT_HARMONY },
};

static char *slurp(const char *name, const char *ext, size_t *len)
{
    const char *src = getenv("CFLOW_SRCDIR");
    char path[4096];
    FILE *f;
    char *b;
    long n;
    snprintf(path, sizeof path, "%s/tests/data/chat/%s.%s", src ? src : ".",
             name, ext);
    f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void test_llamacpp_recorded(void **state)
{
    unsigned seen = 0;
    size_t i;
    (void)state;
    for (i = 0; i < sizeof recorded / sizeof recorded[0]; i++) {
        size_t tl, wl;
        char *tmpl = slurp(recorded[i].name, "tmpl", &tl);
        char *want = slurp(recorded[i].name, "txt", &wl);
        enum eng_chat got = eng_chat_detect(tmpl, tl);
        if (got != recorded[i].want)
            fail_msg("%s: detected %s, want %s", recorded[i].name,
                     eng_chat_name(got), eng_chat_name(recorded[i].want));
        assert_int_equal(strlen(want), wl);
        expect_render(got, conv, NCONV, 1, want);
        seen |= 1u << got;
        free(tmpl);
        free(want);
    }
    /* every family but completion and our own tinyllama is covered */
    assert_int_equal(seen, ((1u << ENG_NCHAT) - 1) &
                           ~(1u << ENG_CHAT_NONE) & ~(1u << ENG_CHAT_TINYLLAMA));
}

/* ---------------------------------------------------------------- names */

/* gpt-oss's reply in channels: a vocabulary of harmony's tokens and a few
 * words, a reply of a reasoning message and an answer; each token's
 * channel as eng_harmony_token says it. */
static void test_harmony_channels(void **state)
{
    static const char *const toks[] = {
        "<unk>", "<s>", "</s>", "<|start|>", "<|channel|>", "<|message|>", "<|end|>",
        "<|return|>", "<|constrain|>", "analysis", "final", "assistant", "\xe2\x96\x81Hi", "hmm",
        "commentary",
    };
    enum { N = sizeof toks / sizeof *toks };
    float sc[N];
    int32_t ty[N];
    size_t len[N];
    for (int i = 0; i < N; i++) {
        sc[i] = 0.0f;
        ty[i] = toks[i][0] == '<' ? 3 : 1;
        len[i] = strlen(toks[i]);
    }
    fmt_kv *kv = fmt_kv_new();
    eng_tok *t = NULL;
    char err[256];
    assert_non_null(kv);
    assert_int_equal(fmt_kv_set_str(kv, "tokenizer.ggml.model", "llama", 5), 0);
    assert_int_equal(fmt_kv_set_arr_str(kv, "tokenizer.ggml.tokens", toks, len, N), 0);
    assert_int_equal(fmt_kv_set_arr_f32(kv, "tokenizer.ggml.scores", sc, N), 0);
    assert_int_equal(fmt_kv_set_arr_i32(kv, "tokenizer.ggml.token_type", ty, N), 0);
    if (eng_tok_load(&t, kv, err, sizeof err))
        fail_msg("%s", err);
    /* <|channel|>analysis<|message|>hmm<|end|><|start|>assistant<|channel|>final
     * <|message|> Hi<|return|>, then a commentary message */
    static const int32_t reply[] = { 4, 9, 5, 13, 6, 3, 11, 4, 10, 5, 12, 12, 7 };
    static const int want[] = { ENG_HCH_NONE, ENG_HCH_NONE, ENG_HCH_NONE, ENG_HCH_ANALYSIS,
                                ENG_HCH_NONE, ENG_HCH_NONE, ENG_HCH_NONE, ENG_HCH_NONE,
                                ENG_HCH_NONE, ENG_HCH_NONE, ENG_HCH_FINAL, ENG_HCH_FINAL,
                                ENG_HCH_END };
    eng_harmony h;
    eng_harmony_init(&h);
    for (size_t i = 0; i < sizeof reply / sizeof *reply; i++)
        if (eng_harmony_token(&h, t, reply[i]) != want[i])
            fail_msg("token %zu: channel %d, want %d", i, eng_harmony_token(&h, t, reply[i]),
                     want[i]);
    /* a commentary message (a tool call's): neither reasoning nor answer */
    static const int32_t tool[] = { 4, 14, 8, 5, 13 };
    eng_harmony_init(&h);
    for (size_t i = 0; i + 1 < sizeof tool / sizeof *tool; i++)
        assert_int_equal(eng_harmony_token(&h, t, tool[i]), ENG_HCH_NONE);
    assert_int_equal(eng_harmony_token(&h, t, 13), ENG_HCH_OTHER);
    eng_tok_free(t);
    fmt_kv_free(kv);
}

static void test_names(void **state)
{
    int c;
    (void)state;
    for (c = 0; c < ENG_NCHAT; c++) {
        const char *n = eng_chat_name((enum eng_chat)c);
        int d;
        assert_non_null(n);
        assert_int_equal(eng_chat_from_name(n), c);
        /* every name distinct */
        for (d = 0; d < c; d++)
            assert_string_not_equal(n, eng_chat_name((enum eng_chat)d));
        /* detection of the bare name agrees */
        assert_int_equal(eng_chat_detect(n, strlen(n)), c);
    }
    assert_string_equal(eng_chat_name(ENG_CHAT_NONE), "none");
    assert_string_equal(eng_chat_name(ENG_CHAT_CHATML), "chatml");
    assert_string_equal(eng_chat_name(ENG_CHAT_LLAMA3), "llama3");
    assert_int_equal(eng_chat_from_name("ChatML"), ENG_CHAT_CHATML);
    assert_int_equal(eng_chat_from_name("llama2-sys-bos"), ENG_CHAT_LLAMA2);
    assert_int_equal(eng_chat_from_name("phi-3"), ENG_CHAT_PHI3);
    assert_int_equal(eng_chat_from_name("vicuna"), -1);
    assert_int_equal(eng_chat_from_name(""), -1);
    assert_int_equal(eng_chat_from_name(NULL), -1);
    assert_string_equal(eng_chat_name(ENG_NCHAT), "unknown");
    assert_string_equal(eng_chat_name((enum eng_chat)-7), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_chatml),
        cmocka_unit_test(test_render_llama2),
        cmocka_unit_test(test_render_llama3),
        cmocka_unit_test(test_render_zephyr),
        cmocka_unit_test(test_render_mistral),
        cmocka_unit_test(test_render_gemma),
        cmocka_unit_test(test_render_phi3),
        cmocka_unit_test(test_render_none),
        cmocka_unit_test(test_render_edges),
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_detect_len),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_harmony_channels),
        cmocka_unit_test(test_llamacpp_recorded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
