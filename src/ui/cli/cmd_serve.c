/*
 * cmd_serve.c — `cflow serve`: the options, the model, the run log's
 * description of both, then src/serve until SIGINT or SIGTERM.
 *
 * Contract (tests and scripts rely on it): once serving, one line on
 * stderr "cflow serve: listening on http://HOST:PORT (...)", with the
 * port chosen when --port 0 asked for any; then a line per request
 * answered; SIGINT or SIGTERM stop the server (streams in flight get an
 * error event, waiting clients 503) and exit 0.
 */
#include "config.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "serve/serve.h"
#include "ui/cli/cli.h"

static const int serve_opts[] = {
    UI_O_MODEL, UI_O_HOST, UI_O_PORT, UI_O_PARALLEL, UI_O_QUEUE, UI_O_TIMEOUT, UI_O_API_KEY,
    UI_O_ALIAS, UI_O_N_PREDICT, UI_O_CTX, UI_O_THREADS, UI_O_TEMP, UI_O_TOP_K, UI_O_TOP_P,
    UI_O_MIN_P, UI_O_REPEAT_PENALTY, UI_O_REPEAT_LAST_N, UI_O_DB, UI_O_NO_LOG, UI_O_KV_TYPE,
    UI_O_PREFETCH, UI_O_EXPERT_IO, UI_O_EXPERT_CACHE, UI_O_EXPERT_AHEAD,
    UI_O_EXPERT_AHEAD_LAYERS, UI_O_NO_MMAP, UI_O_MMAP, UI_O_HELP, UI_O_END
};

static void help(const ui_settings *d)
{
    printf("usage: cflow serve [-m MODEL] [--host ADDR] [--port N] [--parallel N] "
           "[--api-key KEY] [OPTIONS]\n\n"
           "Serve MODEL over HTTP: OpenAI's POST /v1/chat/completions, /v1/completions and\n"
           "GET /v1/models; ollama's POST /api/chat, /api/generate and GET /api/tags;\n"
           "GET /health and /metrics.  Every request is a run in the run log.  The\n"
           "sampling options are the defaults of the requests' fields (cflow(1), SERVE).\n\n");
    ui_opts_help(stdout, serve_opts, d);
}

/* The engine's and the server's lines, from both of its threads. */
static void serve_log(void *ud, int level, const char *msg)
{
    (void)ud;
    (void)level;
    ui_eprintf("cflow serve: %s\n", msg);
}

/* The model's name for clients: --alias, else the file's name without
 * its folder and extension. */
static void model_name(const ui_settings *o, const char *named, char *buf, size_t n)
{
    if (o->alias) {
        snprintf(buf, n, "%s", o->alias);
        return;
    }
    const char *b = strrchr(named, '/');
    b = b && b[1] ? b + 1 : named;
    snprintf(buf, n, "%s", b);
    char *dot = strrchr(buf, '.');
    if (dot && dot != buf)
        *dot = '\0';
}

/* What the run log records of the machine and the model (the model also
 * for /api/tags: its hash and tile type); ls's strings back c's pointers.
 * A log that cannot be opened is one warning. */
static void describe(srv_config *c, ui_logsess *ls, const ui_settings *o, eng_session *s,
                     const char *model, const char *named, char *path, size_t n)
{
    prof_log *l = NULL;
    char err[1024];
    if (ui_logsess_model(ls, model, named, eng_hparams(s), err, sizeof err)) {
        ui_eprintf("cflow serve: warning: %s; continuing without logging\n", err);
        return;
    }
    c->model_info = &ls->mi;
    if (o->no_log)
        return;
    if (ui_log_open(&l, o->db, PROF_LOG_CREATE, err, sizeof err) < 0) {
        char msg[1200];
        ui_log_warning(msg, sizeof msg, err);
        ui_eprintf("cflow serve: %s\n", msg);
        return;
    }
    char bw_src[256];
    ls->m = ui_host(ls, eng_isa(s));
    ls->m.read_bw_gbs = ui_read_bw_log(l, eng_threads(s), bw_src, sizeof bw_src);
    snprintf(path, n, "%s", prof_log_path(l));
    prof_log_close(l);
    c->log_path = path;
    c->machine = &ls->m;
    c->read_bw_gbs = ls->m.read_bw_gbs;
    ui_logsess_run_cfg(s, &c->sampling, &c->run);
}

int ui_cmd_serve(int argc, char **argv)
{
    ui_settings o;
    srv_config c;
    int rc, first;
    char err[1024];

    srv_config_default(&c);
    ui_settings_default(&o);
    o.n_predict = 0;
    o.host = c.host;
    o.port = (long)c.port;
    o.parallel = (long)c.n_slots;
    o.queue = (long)c.queue_max;
    o.timeout = (long)c.timeout_s;
    static const ui_optset set = { "cflow serve", serve_opts, help, NULL, 0 };
    if ((rc = ui_opts_parse(&set, argc, argv, &o, &first)) >= 0)
        return rc;
    const char *model = o.model, *named;
    if (!model && !(model = ui_default_model()))
        return ui_usage_error("serve", "no model: give -m MODEL (no default model is installed)");
    char mbuf[PATH_MAX];
    named = model;
    if (!(model = ui_model_path(model, mbuf, sizeof mbuf)))
        return UI_EXIT_ERR;

    /* the threads srv_start makes inherit a mask without the signals this
     * thread waits for */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    eng_opts eo;
    eng_session *s = NULL;
    ui_settings_eng_opts(&o, &eo);
    if (eng_open(&s, model, &eo, err, sizeof err))
        return ui_error("%s", err);

    char name[256], log_path[PATH_MAX];
    ui_logsess ls;
    eng_sampling sp;
    ui_settings_sampling(&o, &sp);
    c.session = s;
    c.model_path = model;
    model_name(&o, named, name, sizeof name);
    c.model_id = name;
    c.host = o.host;
    c.port = (unsigned)o.port;
    c.n_slots = (unsigned)o.parallel;
    c.queue_max = (unsigned)o.queue;
    c.timeout_s = (unsigned)o.timeout;
    c.api_key = o.api_key;
    c.n_predict = o.n_predict;
    c.sampling = sp;
    c.log = serve_log;
    describe(&c, &ls, &o, s, model, named, log_path, sizeof log_path);

    srv *srv = NULL;
    if ((rc = srv_start(&srv, &c, err, sizeof err))) {
        eng_close(s);
        return rc == SRV_EARG ? ui_usage_error("serve", "%s", err) : ui_error("%s", err);
    }
    ui_eprintf("cflow serve: listening on http://%s%s%s:%u (model %s as \"%s\", %u slot%s of "
               "%u tokens, kernels %s%s)\n",
               strchr(o.host, ':') ? "[" : "", o.host, strchr(o.host, ':') ? "]" : "",
               srv_port(srv), model, name, c.n_slots, c.n_slots > 1 ? "s" : "", eng_n_ctx(s),
               eng_isa(s), c.log_path ? ", logging every request" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    ui_eprintf("cflow serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_stop(srv);
    eng_close(s);
    return UI_EXIT_OK;
}
