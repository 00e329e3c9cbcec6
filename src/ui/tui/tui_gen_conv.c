/*
 * tui_gen_conv.c — the conversation of cflow-tui's generation thread:
 * the transcript rendered into the KV cache, and the reply decoded from
 * it into the chat (the thread and its jobs: tui_gen.c).
 *
 * The conversation.  The transcript (tui_chat) holds every turn; entries
 * from conv_first on are what the model sees, rendered through the model's
 * chat template (completion mode, plain concatenation, for base models).
 * kv[0..n_kv) mirrors the tokens in the session's KV cache: a new prompt
 * is rendered in full (its replies as the tokens they were sampled as,
 * where the cache still holds them: eng_tok_splice_cached), and the
 * engine keeps the longest prefix of it the cache already holds (the
 * earlier turns; on /regen the whole prompt) and prefills only the rest
 * (eng_prefill_reuse).  When the context fills, the
 * oldest turns are dropped (conv_first moves on, the system prompt stays),
 * the pane is told, and the rest is prefilled again from where it first
 * differs (after the system prompt); a single reply longer than the
 * context keeps its second half.
 *
 * gpt-oss (the harmony template) answers in channels (eng_harmony_token):
 * the chat shows the final channel, the answer, which is also what the
 * transcript keeps for the next turns; the analysis channel, its
 * reasoning, is folded: the reply's line counts its tokens (`cflow run
 * --chat --reasoning` shows it); the reply ends at <|return|>.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ui/tui/tui.h"
#include "ui/tui/tui_gen_impl.h"
#include "ui/common/ui.h"

static int kv_reserve(tui_gen *g, size_t n)
{
    if (n <= g->kv_cap)
        return 0;
    size_t cap = g->kv_cap ? g->kv_cap : 256;
    while (cap < n)
        cap *= 2;
    int32_t *p = realloc(g->kv, cap * sizeof *p);
    if (!p)
        return -1;
    g->kv = p;
    g->kv_cap = cap;
    return 0;
}

/* Render the context: the system prompt, the turns from conv_first up to
 * and including the user turn u, the assistant turn opened, then the reply
 * so far (entry a, or none when a < 0).  Tokens into *ids (malloc'd). */
static int render_ids(tui_gen *g, size_t u, long a, int32_t **ids, size_t *n)
{
    tui_chat *c = g->cfg.chat;
    const eng_tok *tok = eng_tokenizer(g->s);
    eng_msg *msgs = NULL;
    char *text = NULL;
    size_t nm = 0;
    int rc = -1;

    pthread_mutex_lock(&c->mu);
    msgs = calloc(c->n + 2, sizeof *msgs);
    if (!msgs)
        goto unlock;
    if (g->cur.system && *g->cur.system)
        msgs[nm++] = (eng_msg){ "system", g->cur.system };
    for (size_t i = g->conv_first; i <= u && i < c->n; i++) {
        const tui_entry *e = &c->e[i];
        if (e->role == TUI_USER)
            msgs[nm++] = (eng_msg){ "user", e->text + e->model_skip };
        else if (e->role == TUI_ASSISTANT)
            msgs[nm++] = (eng_msg){ "assistant", e->text + e->model_skip };
    }
    /* Completion mode concatenates: a turn typed after text that ends in
     * a word ("...friend." + "The dog") gets the space a writer would
     * type, so SentencePiece sees "▁The" as in running text. */
    char **spaced = calloc(nm + 1, sizeof *spaced);
    if (!spaced)
        goto unlock;
    if (g->tmpl == ENG_CHAT_NONE)
        for (size_t k = 1; k < nm; k++) {
            const char *prev = msgs[k - 1].content, *cur = msgs[k].content;
            size_t pl = strlen(prev);
            if (pl && !strchr(" \n\t", prev[pl - 1]) && *cur && !strchr(" \n\t", *cur) &&
                (spaced[k] = malloc(strlen(cur) + 2))) {
                spaced[k][0] = ' ';
                strcpy(spaced[k] + 1, cur);
                msgs[k].content = spaced[k];
            }
        }
    int rrc = eng_chat_render(g->tmpl, msgs, nm, 1, &text);
    for (size_t k = 0; k < nm; k++)
        free(spaced[k]);
    free(spaced);
    if (rrc)
        goto unlock;
    if (a >= 0 && (size_t)a < c->n) {
        const tui_entry *e = &c->e[a];
        size_t tl = strlen(text), rl = e->len - e->model_skip;
        char *t2 = realloc(text, tl + rl + 1);
        if (!t2)
            goto unlock;
        text = t2;
        memcpy(text + tl, e->text + e->model_skip, rl);
        text[tl + rl] = 0;
    }
    rc = 0;
unlock:
    pthread_mutex_unlock(&c->mu);
    free(msgs);
    if (rc) {
        free(text);
        return -1;
    }
    size_t len = strlen(text), cap = len + 16;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v || eng_tok_encode(tok, text, len, 1, g->tmpl != ENG_CHAT_NONE, v, cap, n)) {
        free(v);
        free(text);
        return -1;
    }
    if (*n > cap) {
        int32_t *v2 = realloc(v, *n * sizeof *v);
        size_t cap2 = *n;
        if (!v2 || eng_tok_encode(tok, text, len, 1, g->tmpl != ENG_CHAT_NONE, v2, cap2, n)) {
            free(v2 ? v2 : v);
            free(text);
            return -1;
        }
        v = v2;
    }
    free(text);
    if (*n == 0) {   /* an empty context starts from BOS */
        int32_t bos = eng_tok_bos(tok);
        if (bos < 0) {
            free(v);
            return -1;
        }
        v[(*n)++] = bos;
    }
    *ids = v;
    if (eng_tok_splice_cached(tok, g->kv, g->n_kv, 0, ids, n)) {
        free(*ids);
        return -1;
    }
    return 0;
}

/* Drop the oldest turn before entry u from the context; 0 when there was
 * none to drop. */
static int drop_turn(tui_gen *g, size_t u)
{
    tui_chat *c = g->cfg.chat;
    int dropped = 0;
    pthread_mutex_lock(&c->mu);
    size_t i = g->conv_first;
    while (i < u && c->e[i].role != TUI_USER)
        i++;
    if (i < u) {
        size_t j = i + 1;
        while (j < u && c->e[j].role != TUI_USER)
            j++;
        for (size_t k = g->conv_first; k < j; k++)
            c->e[k].dropped = 1;
        g->conv_first = j;
        dropped = 1;
        c->version++;
    }
    pthread_mutex_unlock(&c->mu);
    return dropped;
}

/* Feed ids into the cache: the engine keeps the longest prefix it already
 * holds (the earlier turns; on /regen all of the prompt) and prefills only
 * the rest (eng_prefill_reuse); *cached (may be NULL) gets the prefix. */
static int feed(tui_gen *g, const int32_t *ids, size_t n, size_t *cached, char *err,
                size_t errlen)
{
    if (kv_reserve(g, n)) {
        snprintf(err, errlen, "out of memory");
        return ENG_ENOMEM;
    }
    tui_gen_snap_refresh(g, TUI_PREFILL);
    int rc = eng_prefill_reuse(g->s, ids, n, cached, err, errlen);
    if (rc) {
        eng_reset(g->s);
        g->n_kv = 0;
        return rc;
    }
    memcpy(g->kv, ids, n * sizeof *ids);
    g->n_kv = n;
    ui_runlog_mark(g->rl);   /* the figures count decode tokens */
    return 0;
}

/* Make the context (turns up to u, reply a so far) fit in limit tokens by
 * dropping the oldest turns, then, for a reply, its first half.  Returns
 * the ids or NULL (error noted). */
static int32_t *fit(tui_gen *g, size_t u, long a, size_t limit, size_t *n, int *n_dropped,
                    int *cut)
{
    int32_t *ids = NULL;
    for (;;) {
        if (render_ids(g, u, a, &ids, n)) {
            tui_gen_note(g, TUI_ERROR, "cannot render or tokenize the conversation");
            return NULL;
        }
        if (*n <= limit)
            return ids;
        free(ids);
        ids = NULL;
        if (drop_turn(g, u)) {
            (*n_dropped)++;
            continue;
        }
        if (a >= 0 && !*cut) {   /* a reply longer than the context */
            tui_chat *c = g->cfg.chat;
            pthread_mutex_lock(&c->mu);
            tui_entry *e = &c->e[a];
            size_t half = e->len - e->model_skip;
            for (size_t t = 0; t < g->tok_n; t++)
                if (g->tok_end[t] >= e->model_skip + half / 2) {
                    half = g->tok_end[t] - e->model_skip;
                    break;
                }
            e->model_skip += half;
            pthread_mutex_unlock(&c->mu);
            *cut = 1;
            continue;
        }
        tui_gen_note(g, TUI_ERROR, "the conversation is %zu tokens but the context holds %zu: "
             "shorten the prompt or /clear", *n, limit);
        return NULL;
    }
}

static void say_dropped(tui_gen *g, int n_dropped, int cut)
{
    if (n_dropped)
        tui_gen_note(g, TUI_NOTE, "context full (%u tokens): dropped the %d oldest turn%s%s",
             eng_n_ctx(g->s), n_dropped, n_dropped > 1 ? "s" : "",
             g->cur.system && *g->cur.system ? "; the system prompt is kept" : "");
    if (cut)
        tui_gen_note(g, TUI_NOTE, "context full (%u tokens): the model now sees the second half"
             " of this reply", eng_n_ctx(g->s));
}

/* Reply text decoded but not yet in the chat.  The UI holds the chat's
 * lock while it lays out the chat pane; the decoder never waits for it
 * (a wait there stops every worker of the token), it keeps the text here
 * and hands it over at a later token, or at the reply's end (wait 1). */
typedef struct pending {
    char  *s;
    size_t n, cap;
} pending;

static void reply_text(tui_gen *g, size_t a, pending *p, const char *s, size_t n, int wait)
{
    tui_chat *c = g->cfg.chat;
    if (n && p->n + n > p->cap) {
        size_t cap = (p->n + n) * 2 + 256;
        char *q = realloc(p->s, cap);
        if (!q) {   /* no room to keep it: hand it over now */
            tui_chat_append(c, a, p->s, p->n);
            tui_chat_append(c, a, s, n);
            p->n = 0;
            return;
        }
        p->s = q;
        p->cap = cap;
    }
    if (n)
        memcpy(p->s + p->n, s, n);
    p->n += n;
    if (wait)
        tui_chat_append(c, a, p->s, p->n);
    else if (tui_chat_append_try(c, a, p->s, p->n))
        return;
    p->n = 0;
}

static void reply_begin(tui_gen *g)
{
    g->in_reply = 1;
    g->rf_prompt = g->rf_gen = 0;
    g->rf_cached = 0;
    g->rf_prefill_s = g->rf_decode_s = 0;
    prof_totals_get(g->p, &g->rf_base);
}

/* The line after a reply, as `ollama run --verbose` gives it; the prompt
 * tokens are those prefilled, with those the cache already held. */
static void reply_end(tui_gen *g, size_t n_tok, const char *why)
{
    char cached[48] = "", speed[48] = "";
    tui_gen_reply_take(g);
    g->in_reply = 0;
    if (g->rf_cached)
        snprintf(cached, sizeof cached, " (+%zu cached)", g->rf_cached);
    if (g->rf_prompt)   /* a regenerate prefills nothing: no speed to give */
        snprintf(speed, sizeof speed, ", %.1f tok/s prefill",
                 g->rf_prefill_s > 0 ? (double)g->rf_prompt / g->rf_prefill_s : 0.0);
    char folded[64] = "";
    if (g->rf_folded)
        snprintf(folded, sizeof folded, " (%zu of them reasoning, folded)", g->rf_folded);
    tui_gen_note(g, TUI_NOTE,
         "prompt %llu tok%s%s; reply %zu tok%s, %.1f tok/s decode; stopped: %s",
         (unsigned long long)g->rf_prompt, cached, speed, n_tok, folded,
         g->rf_decode_s > 0 ? (double)g->rf_gen / g->rf_decode_s : 0.0, why);
}

/* Decode one token at the end of the cache; 0 or -1 (error noted). */
static int decode_one(tui_gen *g, int32_t tok_id)
{
    char err[1024] = "";
    int rc = kv_reserve(g, g->n_kv + 1) ? ENG_ENOMEM : eng_decode(g->s, tok_id, err, sizeof err);
    if (rc) {
        tui_gen_note(g, TUI_ERROR, "%s", rc == ENG_ENOMEM && !err[0] ? "out of memory" : err);
        return -1;
    }
    g->kv[g->n_kv++] = tok_id;
    ui_runlog_token(g->rl);
    return 0;
}

/* The cache is full: drop the oldest turns (or the reply's first half) and
 * prefill the context again, all but its last token, which is decoded, so
 * every token of the reply is one decode step.  0, or -1 (noted). */
static int refit(tui_gen *g, size_t u, size_t a, size_t limit, int *cut)
{
    char err[1024];
    int nd = 0, ct = 0;
    size_t m = 0;
    int32_t *ids = fit(g, u, (long)a, limit, &m, &nd, &ct);
    if (!ids)
        return -1;
    say_dropped(g, nd, ct && !*cut);   /* a reply is cut: said once */
    *cut |= ct;
    g->n_kv = 0;   /* a new context: prefilled from where it differs */
    int rc = m > 1 ? feed(g, ids, m - 1, NULL, err, sizeof err) : 0;
    if (rc)
        tui_gen_note(g, TUI_ERROR, "%s", err);
    else if (m <= 1)
        eng_reset(g->s);
    if (!rc)
        rc = decode_one(g, ids[m - 1]);
    free(ids);
    return rc ? -1 : 0;
}

/* The offset of the reply's text after each token (fit cuts a reply
 * longer than the context at a token's end). */
static void tok_mark(tui_gen *g, size_t n_tok, size_t reply_len)
{
    if (n_tok >= g->tok_cap) {
        size_t cap = g->tok_cap ? g->tok_cap * 2 : 256;
        size_t *p = realloc(g->tok_end, cap * sizeof *p);
        if (p) {
            g->tok_end = p;
            g->tok_cap = cap;
        }
    }
    if (n_tok < g->tok_cap) {
        g->tok_end[n_tok] = reply_len;
        g->tok_n = n_tok + 1;
    }
}

/* Sample and decode the reply into chat entry a; returns why it stopped. */
static const char *decode_reply(tui_gen *g, size_t u, size_t a, size_t reserve, int *cut,
                                size_t *n_out)
{
    char buf[512];
    const eng_tok *tok = eng_tokenizer(g->s);
    uint32_t n_ctx = eng_n_ctx(g->s);
    eng_detok dt;
    eng_detok_init(&dt);
    dt.prev = g->n_kv ? g->kv[g->n_kv - 1] : -1;
    int32_t eos = eng_tok_eos(tok), eot = eng_tok_eot(tok);
    size_t reply_len = 0, n_tok = 0;
    const char *why = NULL;
    double last_snap = 0;
    pending pend = { NULL, 0, 0 };
    const int harmony = g->tmpl == ENG_CHAT_HARMONY;
    eng_harmony hm;
    eng_harmony_init(&hm);
    g->rf_folded = 0;

    g->tok_n = 0;
    while (!why) {
        if (atomic_load(&g->stop)) {
            why = "Ctrl-C";
            break;
        }
        tui_gen_apply(g);
        if (g->run_dirty)
            tui_gen_run_begin(g);
        int32_t next = eng_sampler_sample(g->smp, eng_logits(g->s), g->kv, g->n_kv);
        int ch = harmony ? eng_harmony_token(&hm, tok, next) : ENG_HCH_FINAL;
        if (!g->cur.ignore_eos && (harmony ? ch == ENG_HCH_END : next == eos || next == eot)) {
            why = "end of text";
            break;
        }
        if (ch == ENG_HCH_FINAL && !eng_tok_is_control(tok, next)) {
            size_t k = eng_detok_push(&dt, tok, next, buf, sizeof buf);
            reply_text(g, a, &pend, buf, k, 0);
            reply_len += k;
        } else if (harmony) {       /* the reasoning (folded) and the structure */
            eng_detok_push(&dt, tok, next, buf, sizeof buf);
            g->rf_folded += ch == ENG_HCH_ANALYSIS;
        }
        tok_mark(g, n_tok, reply_len);
        n_tok++;
        if (g->cur.n_predict > 0 && (long)n_tok >= g->cur.n_predict)
            why = "-n limit";   /* the token is decoded still: the cache holds it */
        if (g->n_kv < n_ctx) {
            if (decode_one(g, next))
                why = "error";
        } else {
            /* the cache is full: drop the oldest turns and prefill again,
             * for the -n limit's last token too, which the cache must hold
             * as it does when there is room (and the speed pane and the
             * log count it as the reply's line does) */
            reply_text(g, a, &pend, NULL, 0, 1);   /* fit reads the reply */
            if (refit(g, u, a, n_ctx - reserve, cut))
                why = "context full";
            else
                dt.prev = g->kv[g->n_kv - 1];
        }
        /* the panes read the snapshot at 10 Hz: refreshing it more often
         * than every 20 ms would only cost the decoder */
        double now = prof_now();
        if (now - last_snap > 0.02) {
            tui_gen_snap_refresh(g, TUI_DECODE);
            last_snap = now;
        }
    }
    size_t k = eng_detok_flush(&dt, buf, sizeof buf);
    reply_text(g, a, &pend, buf, k, 1);
    free(pend.s);
    *n_out = n_tok;
    return why;
}

/* Generate the reply to user turn u. */
static void generate(tui_gen *g, size_t u)
{
    char err[1024] = "";
    uint32_t n_ctx = eng_n_ctx(g->s);
    size_t n = 0, reserve = n_ctx / 4 < 64 ? n_ctx / 4 : 64;
    int n_dropped = 0, cut = 0;

    if (g->run_dirty)
        tui_gen_run_begin(g);
    reply_begin(g);
    int32_t *ids = fit(g, u, -1, n_ctx - reserve > 0 ? n_ctx - reserve : 1, &n, &n_dropped,
                       &cut);
    if (!ids) {   /* too long even alone (noted) */
        g->in_reply = 0;
        return;
    }
    say_dropped(g, n_dropped, 0);
    int rc = feed(g, ids, n, &g->rf_cached, err, sizeof err);
    free(ids);
    long a = rc ? -1 : tui_chat_add(g->cfg.chat, TUI_ASSISTANT, "");
    if (rc || a < 0) {
        tui_gen_note(g, TUI_ERROR, "%s", rc ? err : "out of memory");
        g->in_reply = 0;
        return;
    }
    tui_gen_snap_refresh(g, TUI_DECODE);
    tui_gen_show_wait(g);
    size_t n_tok = 0;
    const char *why = decode_reply(g, u, (size_t)a, reserve, &cut, &n_tok);
    reply_end(g, n_tok, why);
    ui_runlog_flush(g->rl);
}

void tui_gen_job_chat(tui_gen *g, const char *text)
{
    if (!g->s) {
        tui_gen_note(g, TUI_ERROR, "no model loaded: /model PATH");
        return;
    }
    long u = tui_chat_add(g->cfg.chat, TUI_USER, text);
    if (u < 0) {
        tui_gen_note(g, TUI_ERROR, "out of memory");
        return;
    }
    tui_gen_show_wait(g);
    generate(g, (size_t)u);
}

void tui_gen_job_regen(tui_gen *g)
{
    tui_chat *c = g->cfg.chat;
    if (!g->s) {
        tui_gen_note(g, TUI_ERROR, "no model loaded: /model PATH");
        return;
    }
    long u = -1;
    pthread_mutex_lock(&c->mu);
    for (size_t i = c->n; i-- > g->conv_first;)
        if (c->e[i].role == TUI_USER) {
            u = (long)i;
            break;
        }
    if (u >= 0) {   /* forget the old reply (and notes after the prompt) */
        for (size_t i = (size_t)u + 1; i < c->n; i++)
            free(c->e[i].text);
        c->n = (size_t)u + 1;
        c->version++;
    }
    pthread_mutex_unlock(&c->mu);
    if (u < 0) {
        tui_gen_note(g, TUI_ERROR, "/regen: no prompt to answer again");
        return;
    }
    generate(g, (size_t)u);
}
