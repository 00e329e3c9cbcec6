/*
 * tui_chat.c — the transcript shared by the UI and the generation thread.
 *
 * An array of entries (user turns, replies, notes, errors), each a growing
 * UTF-8 string.  The generation thread appends decoded text to the last
 * reply; the UI lays entries out on every frame.  One mutex guards it; both
 * sides hold it only to copy or append bytes.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ui/tui/tui.h"

void tui_chat_init(tui_chat *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
}

void tui_chat_free(tui_chat *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->e[i].text);
    free(c->e);
    pthread_mutex_destroy(&c->mu);
}

static int entry_reserve(tui_entry *e, size_t extra)
{
    if (e->len + extra + 1 <= e->cap)
        return 0;
    size_t cap = e->cap ? e->cap : 64;
    while (cap < e->len + extra + 1)
        cap *= 2;
    char *p = realloc(e->text, cap);
    if (!p)
        return -1;
    e->text = p;
    e->cap = cap;
    return 0;
}

long tui_chat_add(tui_chat *c, int role, const char *text)
{
    long idx = -1;
    pthread_mutex_lock(&c->mu);
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 32;
        tui_entry *p = realloc(c->e, cap * sizeof *p);
        if (!p)
            goto out;
        c->e = p;
        c->cap = cap;
    }
    tui_entry *e = &c->e[c->n];
    memset(e, 0, sizeof *e);
    e->role = role;
    size_t n = text ? strlen(text) : 0;
    if (entry_reserve(e, n))
        goto out;
    if (n)
        memcpy(e->text, text, n);
    e->len = n;
    e->text[n] = 0;
    idx = (long)c->n++;
    c->version++;
out:
    pthread_mutex_unlock(&c->mu);
    return idx;
}

long tui_chat_addv(tui_chat *c, int role, const char *fmt, va_list ap)
{
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return tui_chat_add(c, role, buf);
}

static void append_locked(tui_chat *c, size_t i, const char *s, size_t n)
{
    if (i < c->n && !entry_reserve(&c->e[i], n)) {
        tui_entry *e = &c->e[i];
        memcpy(e->text + e->len, s, n);
        e->len += n;
        e->text[e->len] = 0;
        c->version++;
    }
}

void tui_chat_append(tui_chat *c, size_t i, const char *s, size_t n)
{
    if (!n)
        return;
    pthread_mutex_lock(&c->mu);
    append_locked(c, i, s, n);
    pthread_mutex_unlock(&c->mu);
}

int tui_chat_append_try(tui_chat *c, size_t i, const char *s, size_t n)
{
    if (!n)
        return 0;
    if (pthread_mutex_trylock(&c->mu))
        return 1;
    append_locked(c, i, s, n);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

void tui_chat_clear(tui_chat *c)
{
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n; i++)
        free(c->e[i].text);
    c->n = 0;
    c->version++;
    pthread_mutex_unlock(&c->mu);
}

void tui_chat_set(tui_chat *c, size_t i, const char *text)
{
    pthread_mutex_lock(&c->mu);
    if (i < c->n) {
        c->e[i].len = 0;
        c->e[i].text[0] = 0;
        append_locked(c, i, text, strlen(text));
    }
    pthread_mutex_unlock(&c->mu);
}

void tui_chat_progress(void *ud, const char *what, uint64_t done, uint64_t total)
{
    tui_chat_prog *p = ud;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 0;
    if (p->idx >= 0 && pct == p->pct)
        return;
    char buf[2048];
    snprintf(buf, sizeof buf, "%s %s: %d%%", !strcmp(what, "convert") ? "converting" : what,
             p->subject, pct);
    if (p->idx < 0)
        p->idx = tui_chat_add(p->chat, TUI_NOTE, buf);
    else
        tui_chat_set(p->chat, (size_t)p->idx, buf);
    p->pct = pct;
    char b = 1;
    if (p->wake_fd >= 0 && write(p->wake_fd, &b, 1) < 0) {
        /* a full pipe already wakes the UI */
    }
}

int tui_chat_save(tui_chat *c, const char *path, const char *model, const char *system)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    char when[64];
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&now, &tm));
    fprintf(f, "# cflow-tui transcript\n\n- model: `%s`\n- saved: %s\n\n", model, when);
    if (system && *system)
        fprintf(f, "## System\n\n%s\n\n", system);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n; i++) {
        const tui_entry *e = &c->e[i];
        switch (e->role) {
        case TUI_USER: fprintf(f, "## User\n\n%s\n\n", e->text); break;
        case TUI_ASSISTANT: fprintf(f, "## Assistant\n\n%s\n\n", e->text); break;
        case TUI_NOTE: fprintf(f, "> %s\n\n", e->text); break;
        default: fprintf(f, "> **error:** %s\n\n", e->text); break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    int bad = ferror(f);
    if (fclose(f) || bad) {
        if (!errno)
            errno = EIO;
        return -1;
    }
    return 0;
}
