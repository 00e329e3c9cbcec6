/*
 * eng_chat.c — chat templates: turning a list of {role, content} messages
 * into the prompt text a chat-tuned model was trained on.
 *
 * This is not a Jinja interpreter.  Like llama.cpp's llm_chat_apply_template
 * (src/llama-chat.cpp) we recognise the common template families from
 * substrings of the model's tokenizer.chat_template and render each family
 * with hand-written code.  The strings below reproduce llama.cpp's output
 * byte for byte for the families we keep (tinyllama is ours, see below):
 * tests/data/chat holds llama.cpp's renderings of one conversation per
 * family, which tests/engine/test_chat.c compares with ours.
 * eng_chat_render returns 0, ENG_ENOMEM, or ENG_EARG for a NULL out, an
 * unknown family or NULL msgs with n > 0.  The rendered text contains
 * special-token strings ("<|im_start|>", "</s>", ...) and must be encoded
 * with parse_special so they become control tokens.  No template emits the
 * leading BOS: eng_tok_encode(add_special) adds it.
 *
 * Families (the message roles are normally "system", "user", "assistant";
 * other roles are written verbatim where the family writes role names):
 *
 *   none     completion mode: every system message's content followed by a
 *            blank line ("\n\n"), then the other contents concatenated as
 *            they are.  add_assistant adds nothing.
 *   chatml   <|im_start|>{role}\n{content}<|im_end|>\n ...
 *            opener <|im_start|>assistant\n
 *   llama2   llama.cpp's "llama2-sys-bos" variant (Meta's Llama-2-chat
 *            shape): [INST] <<SYS>>\n{sys}\n<</SYS>>\n\n{user} [/INST]
 *            {assistant}</s><s>[INST] {user} [/INST] ...  The first "<s>"
 *            is omitted (the tokenizer adds BOS); later turns carry "<s>"
 *            as text, which parse_special turns into the BOS token.  The
 *            trailing "[/INST]" already opens the assistant turn, so
 *            add_assistant adds nothing.  Contents are not trimmed, and,
 *            as in llama.cpp, no spaces are put around past assistant
 *            answers (Meta's template writes " {answer} </s>").
 *   llama3   <|start_header_id|>{role}<|end_header_id|>\n\n{trim(content)}
 *            <|eot_id|> ...  opener <|start_header_id|>assistant
 *            <|end_header_id|>\n\n
 *   zephyr   <|{role}|>\n{content}<|endoftext|>\n ...  opener <|assistant|>\n
 *            (llama.cpp's "zephyr": stablelm-2-zephyr, whose end of turn is
 *            the literal "<|endoftext|>")
 *   tinyllama the same shape ending each turn with "</s>": the templates of
 *            HuggingFaceH4/zephyr-7b-beta and TinyLlama-Chat, which write
 *            eos_token, "</s>" in their Llama vocabulary.  llama.cpp has no
 *            such family (it renders those templates as "glmedge", with no
 *            end of turn at all, which those models never saw).
 *   mistral  llama.cpp's "mistral-v7": [SYSTEM_PROMPT] {sys}[/SYSTEM_PROMPT]
 *            [INST] {user}[/INST] {assistant}</s> ...  No opener (the
 *            "[/INST]" is one).
 *   gemma    <start_of_turn>{user|model}\n{trim(content)}<end_of_turn>\n
 *            ...  Gemma has no system role: the trimmed system text and a
 *            blank line are prepended to the next user turn.  Opener
 *            <start_of_turn>model\n
 *   phi3     <|{role}|>\n{content}<|end|>\n ...  opener <|assistant|>\n
 *            (Phi-3, Phi-3.5 and Phi-4-mini: llama.cpp renders them all so)
 *   deepseek2 DeepSeek-V2: {system}\n\n, User: {user}\n\n, Assistant:
 *            {assistant}<｜end▁of▁sentence｜> ...  opener "Assistant:"
 *   harmony  gpt-oss, as llama.cpp's "gpt-oss" renders it:
 *            <|start|>{role}<|message|>{content}<|end|> (an assistant turn
 *            ends <|return|>) ...  opener <|start|>assistant; the model
 *            writes its channels itself (<|channel|>analysis<|message|>
 *            ...<|end|><|start|>assistant<|channel|>final<|message|>
 *            ...<|return|>), which eng_harmony_feed takes apart
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/eng_impl.h"
#include "format/cflow_format.h"

/* ------------------------------------------------------------- names */

static const char *const chat_names[ENG_NCHAT] = {
    [ENG_CHAT_NONE] = "none",
    [ENG_CHAT_CHATML] = "chatml",
    [ENG_CHAT_LLAMA2] = "llama2",
    [ENG_CHAT_LLAMA3] = "llama3",
    [ENG_CHAT_ZEPHYR] = "zephyr",
    [ENG_CHAT_MISTRAL] = "mistral",
    [ENG_CHAT_GEMMA] = "gemma",
    [ENG_CHAT_PHI3] = "phi3",
    [ENG_CHAT_TINYLLAMA] = "tinyllama",
    [ENG_CHAT_DEEPSEEK2] = "deepseek2",
    [ENG_CHAT_HARMONY] = "harmony",
};

/* Other spellings accepted by eng_chat_from_name (llama.cpp's names for the
 * variants we render, and obvious synonyms). */
static const struct {
    const char   *name;
    enum eng_chat c;
} chat_aliases[] = {
    { "completion", ENG_CHAT_NONE },
    { "raw", ENG_CHAT_NONE },
    { "llama2-sys-bos", ENG_CHAT_LLAMA2 },
    { "llama-2", ENG_CHAT_LLAMA2 },
    { "llama-3", ENG_CHAT_LLAMA3 },
    { "mistral-v7", ENG_CHAT_MISTRAL },
    { "phi-3", ENG_CHAT_PHI3 },
    { "gpt-oss", ENG_CHAT_HARMONY },
    { "deepseek-v2", ENG_CHAT_DEEPSEEK2 },
};

const char *eng_chat_name(enum eng_chat c)
{
    if ((int)c < 0 || c >= ENG_NCHAT)
        return "unknown";
    return chat_names[c];
}

int eng_chat_from_name(const char *name)
{
    size_t i;

    if (!name)
        return -1;
    for (i = 0; i < ENG_NCHAT; i++)
        if (strcasecmp(name, chat_names[i]) == 0)
            return (int)i;
    for (i = 0; i < sizeof chat_aliases / sizeof chat_aliases[0]; i++)
        if (strcasecmp(name, chat_aliases[i].name) == 0)
            return (int)chat_aliases[i].c;
    return -1;
}

/* ----------------------------------------------------------- detection */

struct text {
    const char *s;
    size_t      n;
};

static int has(struct text t, const char *needle)
{
    return memmem(t.s, t.n, needle, strlen(needle)) != NULL;
}

/*
 * The order of the tests follows llama.cpp's llm_chat_detect_template, so a
 * template that llama.cpp puts in a family we render lands in the same
 * family.  Families we do not render are mapped to the nearest one we do,
 * or to NONE:
 *   "<|im_start|>"             ChatML (llama.cpp: Phi-4 when "<|im_sep|>"
 *                              is present, SmolVLM with "<end_of_utterance>";
 *                              both are ChatML-shaped, we render ChatML)
 *   "[INST]" ("mistral..." name) Mistral v7 when "[SYSTEM_PROMPT]" is
 *                              present; the official v3 templates (marked
 *                              by "[AVAILABLE_TOOLS]" without the v1 " [INST]"
 *                              spacing) render their user/assistant turns
 *                              exactly as v7 does, so they map to Mistral
 *                              too; everything else (Llama-2, Mistral v0.1/
 *                              v0.2 and v1) is Llama-2.
 *   "<|assistant|>" + "<|end|>"  Phi-3
 *   "<|user|>" + "<|endoftext|>" Zephyr (a literal end of turn; llama.cpp
 *                              tests "<|assistant|>" + "<|user|>" first and
 *                              calls such a template Falcon-3 / GLM-Edge)
 *   "<|assistant|>" + "<|user|>" TinyLlama (llama.cpp: Falcon-3 / GLM-Edge;
 *                              the TinyLlama and zephyr-7b templates, which
 *                              write eos_token, land here)
 *   "<|user|>" + "</s>"        TinyLlama
 *   "<start_of_turn>"          Gemma
 *   "<|start_header_id|>" + "<|end_header_id|>"  Llama-3
 *   "'Assistant: ' + message['content'] + eos_token"  DeepSeek-V2
 *   "<|start|>" + "<|channel|>"  gpt-oss's harmony
 *   anything else              NONE (the caller may pick a default)
 * A text that is exactly one of our names (or aliases) selects that family.
 */
enum eng_chat eng_chat_detect(const char *jinja, size_t len)
{
    struct text t = { jinja, len };
    char name[32];

    if (!jinja || len == 0)
        return ENG_CHAT_NONE;

    if (len < sizeof name) {
        int c;
        memcpy(name, jinja, len);
        name[len] = '\0';
        c = eng_chat_from_name(name);
        if (c >= 0)
            return (enum eng_chat)c;
    }

    if (has(t, "<|im_start|>"))
        return ENG_CHAT_CHATML;
    if ((len >= 7 && memcmp(jinja, "mistral", 7) == 0) || has(t, "[INST]")) {
        if (has(t, "[SYSTEM_PROMPT]"))
            return ENG_CHAT_MISTRAL;
        if (has(t, "[AVAILABLE_TOOLS]") && !has(t, " [INST]"))
            return ENG_CHAT_MISTRAL;
        return ENG_CHAT_LLAMA2;
    }
    if (has(t, "<|assistant|>") && has(t, "<|end|>"))
        return ENG_CHAT_PHI3;
    if (has(t, "<|user|>") && has(t, "<|endoftext|>"))
        return ENG_CHAT_ZEPHYR;
    if (has(t, "<|user|>") && (has(t, "<|assistant|>") || has(t, "</s>")))
        return ENG_CHAT_TINYLLAMA;
    if (has(t, "<start_of_turn>"))
        return ENG_CHAT_GEMMA;
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>"))
        return ENG_CHAT_LLAMA3;
    if (has(t, "'Assistant: ' + message['content'] + eos_token"))
        return ENG_CHAT_DEEPSEEK2;
    if (has(t, "<|start|>") && has(t, "<|channel|>"))
        return ENG_CHAT_HARMONY;
    return ENG_CHAT_NONE;
}

/* The family of an open model's tokenizer.chat_template. */
static enum eng_chat chat_of_model(const fmt_model *m)
{
    size_t len = 0;
    const char *j = fmt_kv_get_str(fmt_model_kv(m), "tokenizer.chat_template", &len);
    return j ? eng_chat_detect(j, len) : ENG_CHAT_NONE;
}

enum eng_chat eng_chat_of_file(const char *model_path)
{
    enum eng_chat c;
    fmt_model *m = NULL;
    char err[256];

    if (!model_path || fmt_model_open(&m, model_path, err, sizeof err))
        return ENG_CHAT_NONE;
    c = chat_of_model(m);
    fmt_model_close(m);
    return c;
}

enum eng_chat eng_session_chat(const eng_session *s)
{
    return chat_of_model(eng_model(s));
}

/* ------------------------------------------------------------ rendering */

/* A growable byte buffer; ok drops to 0 on the first failed allocation and
 * every later append is then a no-op. */
struct sbuf {
    char  *p;
    size_t n, cap;
    int    ok;
};

static void sb_putn(struct sbuf *b, const char *s, size_t n)
{
    size_t need;

    if (!b->ok || n == 0)
        return;
    if (n > ((size_t)-1) / 4 - b->n) {  /* keeps need and cap * 2 in range */
        b->ok = 0;
        return;
    }
    need = b->n + n + 1;                /* + the terminating NUL */
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *q;
        while (cap < need)
            cap *= 2;
        q = realloc(b->p, cap);
        if (!q) {
            b->ok = 0;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

static int is_space(unsigned char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' ||
           ch == '\f' || ch == '\r';
}

/* Append s without leading/trailing ASCII white space (llama.cpp's trim). */
static void sb_put_trim(struct sbuf *b, const char *s)
{
    size_t i = 0, j = strlen(s);

    while (i < j && is_space((unsigned char)s[i]))
        i++;
    while (j > i && is_space((unsigned char)s[j - 1]))
        j--;
    sb_putn(b, s + i, j - i);
}

static const char *role_of(const eng_msg *m)
{
    return m->role ? m->role : "user";
}

static const char *content_of(const eng_msg *m)
{
    return m->content ? m->content : "";
}

static int is_role(const eng_msg *m, const char *r)
{
    return strcmp(role_of(m), r) == 0;
}

static void render_none(struct sbuf *b, const eng_msg *msgs, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (is_role(&msgs[i], "system")) {
            sb_puts(b, content_of(&msgs[i]));
            sb_puts(b, "\n\n");
        }
    }
    for (i = 0; i < n; i++)
        if (!is_role(&msgs[i], "system"))
            sb_puts(b, content_of(&msgs[i]));
}

static void render_chatml(struct sbuf *b, const eng_msg *msgs, size_t n,
                          int add_ass)
{
    size_t i;

    for (i = 0; i < n; i++) {
        sb_puts(b, "<|im_start|>");
        sb_puts(b, role_of(&msgs[i]));
        sb_puts(b, "\n");
        sb_puts(b, content_of(&msgs[i]));
        sb_puts(b, "<|im_end|>\n");
    }
    if (add_ass)
        sb_puts(b, "<|im_start|>assistant\n");
}

/* llama.cpp LLM_CHAT_TEMPLATE_LLAMA_2_SYS_BOS. */
static void render_llama2(struct sbuf *b, const eng_msg *msgs, size_t n)
{
    int inside = 1;             /* the first "[INST] " is written up front */
    size_t i;

    sb_puts(b, "[INST] ");
    for (i = 0; i < n; i++) {
        const char *c = content_of(&msgs[i]);
        if (!inside) {
            inside = 1;
            sb_puts(b, "<s>[INST] ");
        }
        if (is_role(&msgs[i], "system")) {
            sb_puts(b, "<<SYS>>\n");
            sb_puts(b, c);
            sb_puts(b, "\n<</SYS>>\n\n");
        } else if (is_role(&msgs[i], "user")) {
            sb_puts(b, c);
            sb_puts(b, " [/INST]");
        } else {
            sb_puts(b, c);
            sb_puts(b, "</s>");
            inside = 0;
        }
    }
}

static void render_llama3(struct sbuf *b, const eng_msg *msgs, size_t n,
                          int add_ass)
{
    size_t i;

    for (i = 0; i < n; i++) {
        sb_puts(b, "<|start_header_id|>");
        sb_puts(b, role_of(&msgs[i]));
        sb_puts(b, "<|end_header_id|>\n\n");
        sb_put_trim(b, content_of(&msgs[i]));
        sb_puts(b, "<|eot_id|>");
    }
    if (add_ass)
        sb_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Zephyr (eot "<|endoftext|>"), TinyLlama ("</s>") and Phi-3 ("<|end|>")
 * share one shape. */
static void render_pipe_roles(struct sbuf *b, const eng_msg *msgs, size_t n,
                              int add_ass, const char *eot)
{
    size_t i;

    for (i = 0; i < n; i++) {
        sb_puts(b, "<|");
        sb_puts(b, role_of(&msgs[i]));
        sb_puts(b, "|>\n");
        sb_puts(b, content_of(&msgs[i]));
        sb_puts(b, eot);
        sb_puts(b, "\n");
    }
    if (add_ass)
        sb_puts(b, "<|assistant|>\n");
}

/* llama.cpp LLM_CHAT_TEMPLATE_MISTRAL_V7. */
static void render_mistral(struct sbuf *b, const eng_msg *msgs, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        const char *c = content_of(&msgs[i]);
        if (is_role(&msgs[i], "system")) {
            sb_puts(b, "[SYSTEM_PROMPT] ");
            sb_puts(b, c);
            sb_puts(b, "[/SYSTEM_PROMPT]");
        } else if (is_role(&msgs[i], "user")) {
            sb_puts(b, "[INST] ");
            sb_puts(b, c);
            sb_puts(b, "[/INST]");
        } else {
            sb_puts(b, " ");
            sb_puts(b, c);
            sb_puts(b, "</s>");
        }
    }
}

static void render_gemma(struct sbuf *b, const eng_msg *msgs, size_t n,
                         int add_ass)
{
    struct sbuf sys = { NULL, 0, 0, 1 };    /* pending system text */
    size_t i;

    for (i = 0; i < n; i++) {
        const char *role = role_of(&msgs[i]);
        int model;
        if (strcmp(role, "system") == 0) {
            sb_put_trim(&sys, content_of(&msgs[i]));
            continue;
        }
        model = strcmp(role, "assistant") == 0;
        sb_puts(b, "<start_of_turn>");
        sb_puts(b, model ? "model" : role);
        sb_puts(b, "\n");
        if (sys.n > 0 && !model) {
            sb_putn(b, sys.p, sys.n);
            sb_puts(b, "\n\n");
            sys.n = 0;
        }
        sb_put_trim(b, content_of(&msgs[i]));
        sb_puts(b, "<end_of_turn>\n");
    }
    if (!sys.ok)
        b->ok = 0;
    free(sys.p);
    if (add_ass)
        sb_puts(b, "<start_of_turn>model\n");
}

/* llama.cpp LLM_CHAT_TEMPLATE_DEEPSEEK_2 (other roles are left out) */
static void render_deepseek2(struct sbuf *b, const eng_msg *msgs, size_t n, int add_ass)
{
    for (size_t i = 0; i < n; i++) {
        const char *c = content_of(&msgs[i]);
        if (is_role(&msgs[i], "system")) {
            sb_puts(b, c);
            sb_puts(b, "\n\n");
        } else if (is_role(&msgs[i], "user")) {
            sb_puts(b, "User: ");
            sb_puts(b, c);
            sb_puts(b, "\n\n");
        } else if (is_role(&msgs[i], "assistant")) {
            sb_puts(b, "Assistant: ");
            sb_puts(b, c);
            sb_puts(b, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
        }
    }
    if (add_ass)
        sb_puts(b, "Assistant:");
}

/* llama.cpp LLM_CHAT_TEMPLATE_OPENAI_MOE (gpt-oss's harmony) */
static void render_harmony(struct sbuf *b, const eng_msg *msgs, size_t n, int add_ass)
{
    for (size_t i = 0; i < n; i++) {
        sb_puts(b, "<|start|>");
        sb_puts(b, role_of(&msgs[i]));
        sb_puts(b, "<|message|>");
        sb_puts(b, content_of(&msgs[i]));
        sb_puts(b, is_role(&msgs[i], "assistant") ? "<|return|>" : "<|end|>");
    }
    if (add_ass)
        sb_puts(b, "<|start|>assistant");
}

int eng_chat_render(enum eng_chat c, const eng_msg *msgs, size_t n,
                    int add_assistant, char **out)
{
    struct sbuf b = { NULL, 0, 0, 1 };

    if (!out)
        return ENG_EARG;
    *out = NULL;
    if ((int)c < 0 || c >= ENG_NCHAT || (n > 0 && !msgs))
        return ENG_EARG;

    switch (c) {
    case ENG_CHAT_NONE:
        render_none(&b, msgs, n);
        break;
    case ENG_CHAT_CHATML:
        render_chatml(&b, msgs, n, add_assistant);
        break;
    case ENG_CHAT_LLAMA2:
        render_llama2(&b, msgs, n);
        break;
    case ENG_CHAT_LLAMA3:
        render_llama3(&b, msgs, n, add_assistant);
        break;
    case ENG_CHAT_ZEPHYR:
        render_pipe_roles(&b, msgs, n, add_assistant, "<|endoftext|>");
        break;
    case ENG_CHAT_TINYLLAMA:
        render_pipe_roles(&b, msgs, n, add_assistant, "</s>");
        break;
    case ENG_CHAT_MISTRAL:
        render_mistral(&b, msgs, n);
        break;
    case ENG_CHAT_GEMMA:
        render_gemma(&b, msgs, n, add_assistant);
        break;
    case ENG_CHAT_PHI3:
        render_pipe_roles(&b, msgs, n, add_assistant, "<|end|>");
        break;
    case ENG_CHAT_DEEPSEEK2:
        render_deepseek2(&b, msgs, n, add_assistant);
        break;
    case ENG_CHAT_HARMONY:
        render_harmony(&b, msgs, n, add_assistant);
        break;
    case ENG_NCHAT:
        break;
    }

    if (b.ok && !b.p) {                 /* nothing written: an empty string */
        b.p = malloc(1);
        if (b.p)
            b.p[0] = '\0';
        else
            b.ok = 0;
    }
    if (!b.ok) {
        free(b.p);
        return ENG_ENOMEM;
    }
    *out = b.p;
    return 0;
}

int eng_chat_prompt(const char *model_path, const char *system,
                    const char *user, char **out, char *err, size_t errlen)
{
    enum eng_chat c = eng_chat_of_file(model_path);
    eng_msg m[2];
    size_t n = 0;

    if (out)
        *out = NULL;
    if (c == ENG_CHAT_NONE) {
        snprintf(err, errlen, "%s: the model has no chat template "
                 "(tokenizer.chat_template), so it cannot chat", model_path);
        return ENG_EARG;
    }
    if (system) {
        m[n].role = "system";
        m[n++].content = system;
    }
    m[n].role = "user";
    m[n++].content = user ? user : "";
    if (eng_chat_render(c, m, n, 1, out)) {
        snprintf(err, errlen, "%s: out of memory", model_path);
        return ENG_ENOMEM;
    }
    return 0;
}

/* ------------------------------------------------- harmony's channels */

void eng_harmony_init(eng_harmony *h)
{
    memset(h, 0, sizeof *h);
    h->header = 1;          /* after the opener "<|start|>assistant" */
}

static int piece_is(const char *p, size_t n, const char *s)
{
    return n == strlen(s) && memcmp(p, s, n) == 0;
}

int eng_harmony_token(eng_harmony *h, const eng_tok *t, int32_t id)
{
    size_t n = 0;
    const char *p = eng_tok_piece(t, id, &n);
    if (!p)
        return ENG_HCH_NONE;
    if (piece_is(p, n, "<|return|>") || piece_is(p, n, "<|call|>"))
        return ENG_HCH_END;
    if (piece_is(p, n, "<|end|>") || piece_is(p, n, "<|start|>")) {
        h->header = 1;
        h->naming = 0;
        h->channel = ENG_HCH_NONE;
        return ENG_HCH_NONE;
    }
    if (piece_is(p, n, "<|channel|>")) {
        h->header = h->naming = 1;
        h->name_n = 0;
        return ENG_HCH_NONE;
    }
    if (piece_is(p, n, "<|constrain|>")) {
        h->naming = 0;
        return ENG_HCH_NONE;
    }
    if (piece_is(p, n, "<|message|>")) {
        h->header = h->naming = 0;
        h->channel = h->name_n >= 8 && !memcmp(h->name, "analysis", 8) ? ENG_HCH_ANALYSIS
                     : h->name_n >= 5 && !memcmp(h->name, "final", 5)  ? ENG_HCH_FINAL
                                                                        : ENG_HCH_OTHER;
        return ENG_HCH_NONE;
    }
    if (!h->header)
        return h->channel ? h->channel : ENG_HCH_FINAL;   /* (no header: the answer) */
    for (size_t i = 0; h->naming && i < n && h->name_n < sizeof h->name; i++)
        h->name[h->name_n++] = p[i];
    return ENG_HCH_NONE;
}
