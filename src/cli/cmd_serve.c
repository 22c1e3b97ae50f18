/* invar serve: the OpenAI-compatible HTTP server (src/server/). Starts the engine thread
 * and the HTTP daemon, then waits for SIGTERM/SIGINT: stops accepting, lets running
 * requests finish for up to --drain-s seconds, cancels the rest, exits 0. */
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_spec.h"
#include "common/clock.h"
#include "common/utf8.h"
#include "server/server.h"

static const char *HELP =
    "usage: invar serve [options]\n"
    "\n"
    "Serves the model over HTTP with the OpenAI API: POST /v1/completions,\n"
    "POST /v1/chat/completions (streaming with \"stream\": true), GET /v1/models,\n"
    "GET /health, GET /metrics (Prometheus). See docs/server.md.\n"
    "\n"
    "options:\n"
    "  --model PATH           GGUF file or Hugging Face directory (default: the bundled\n"
    "                         SmolLM2-135M-Instruct)\n"
    "  --host ADDR            IPv4 address to listen on (default 127.0.0.1)\n"
    "  --port N               TCP port (default 8080)\n"
    "  --max-connections N    concurrent completion requests; more get 429 (default 256)\n"
    "  --max-body-kb N        largest request body (default 1024)\n"
    "  --max-prompts-per-request N  prompts one /v1/completions request may carry (default 64,\n"
    "                         at most 4096; also raises the choices limit, n x prompts, from 128)\n"
    "  --max-connections-per-ip N  open connections from one address (default --max-connections + 64)\n"
    "  --max-open-connections N    open connections in all (default 4 x --max-connections-per-ip)\n"
    "  --idle-timeout-s N     close a connection silent for N s (default 30)\n"
    "  --request-timeout-s N  close a connection whose request is not all in after N s (default 15)\n"
    "  --drain-s N            on SIGTERM, seconds to let running requests finish (default 10)\n" CLI_SPEC_HELP
        CLI_ENGINE_HELP;

/* The last path component, *len bytes (a directory's "DIR/" names DIR). */
static const char *basename_of(const char *p, size_t *len) {
    size_t n = strlen(p), b;
    while (n > 1 && p[n - 1] == '/') n--;
    for (b = n; b > 0 && p[b - 1] != '/'; b--) {}
    *len = n - b;
    return p + b;
}

static void wait_idle(srv_state *s, double seconds) {
    double t0 = now_seconds();
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int active = s->active_calls;
        pthread_mutex_unlock(&s->mu);
        if (!active || now_seconds() - t0 >= seconds) return;
        usleep(20000);
    }
}

/* Each connection holds a socket: raises the soft open-files limit to fit max_open (plus
 * room for the model, the listening socket and pipes), or lowers max_open to fit the hard one. */
static int fit_fd_limit(int max_open) {
    struct rlimit rl;
    rlim_t need = (rlim_t)max_open + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= need) return max_open;
    rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need ? rl.rlim_max : need;
    if (setrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur < need) {
        getrlimit(RLIMIT_NOFILE, &rl);
        int fit = rl.rlim_cur > 128 ? (int)(rl.rlim_cur - 64) : 64;
        fprintf(stderr, "invar serve: open-files limit %llu: at most %d open connections\n",
                (unsigned long long)rl.rlim_cur, fit);
        return fit < max_open ? fit : max_open;
    }
    return max_open;
}

int cmd_serve(int argc, char **argv) {
    const char *model_opt = NULL, *host = "127.0.0.1";
    int64_t port = 8080, max_conn = 256, max_body_kb = 1024, drain_s = 10, max_prompts = 64;
    int64_t per_ip = 0, max_open = 0, idle_s = 30, request_s = 15; /* 0: derived below */
    invar_engine_config cfg;
    invar_engine_config_default(&cfg);
    cli_spec spec = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(HELP, stdout); return EXIT_OK; }
        if (strncmp(a, "--", 2) || i + 1 >= argc) {
            fprintf(stderr, "invar serve: bad argument '%s' (see --help)\n", a);
            return EXIT_USAGE;
        }
        const char *name = a + 2, *val = argv[++i];
        int r = cli_engine_opt(&cfg, name, val);
        if (r == 0) r = cli_spec_opt(&spec, &cfg, name, val);
        bool ok = true;
        if (r < 0) return EXIT_USAGE;
        if (r) continue;
        if (!strcmp(name, "model")) model_opt = val;
        else if (!strcmp(name, "host")) host = val;
        else if (!strcmp(name, "port")) ok = parse_i64(val, 0, 65535, &port);
        else if (!strcmp(name, "max-connections")) ok = parse_i64(val, 1, 100000, &max_conn);
        else if (!strcmp(name, "max-body-kb")) ok = parse_i64(val, 1, 1 << 20, &max_body_kb);
        else if (!strcmp(name, "max-prompts-per-request")) ok = parse_i64(val, 1, SRV_MAX_PROMPTS_LIMIT, &max_prompts);
        else if (!strcmp(name, "drain-s")) ok = parse_i64(val, 0, 3600, &drain_s);
        else if (!strcmp(name, "max-connections-per-ip")) ok = parse_i64(val, 1, 100000, &per_ip);
        else if (!strcmp(name, "max-open-connections")) ok = parse_i64(val, 1, 100000, &max_open);
        else if (!strcmp(name, "idle-timeout-s")) ok = parse_i64(val, 1, 86400, &idle_s);
        else if (!strcmp(name, "request-timeout-s")) ok = parse_i64(val, 1, 86400, &request_s);
        else { fprintf(stderr, "invar serve: unknown option '%s' (see --help)\n", a); return EXIT_USAGE; }
        if (!ok) { fprintf(stderr, "invar serve: bad value '%s' for %s\n", val, a); return EXIT_USAGE; }
    }
    /* Signals are taken by sigwait below, never by the server's threads. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    const char *path = cli_model_path(model_opt);
    invar_model *m = cli_load_model(model_opt);
    if (!m) return EXIT_MODEL;
    int spec_rc = cli_spec_load(&spec, &cfg);
    if (spec_rc) {
        invar_model_free(m);
        return spec_rc;
    }
    char err[256];
    srv_state s;
    memset(&s, 0, sizeof s);
    s.model = m;
    s.spec_mode = spec.mode;
    s.spec_tokens = spec.tokens;
    /* The name goes into JSON (and is matched against requests): valid UTF-8 only. */
    size_t name_len;
    const char *base = basename_of(path, &name_len);
    char *name = utf8_sanitize(base, name_len);
    if (!name) {
        invar_model_free(m);
        cli_spec_free(&spec);
        return EXIT_IO;
    }
    s.model_name = name;
    s.max_connections = (int)max_conn;
    s.max_body = (size_t)max_body_kb * 1024;
    /* One client may fill every request slot and still reach /health and /metrics; it takes
     * four clients at their limit to fill the server. */
    if (!per_ip) per_ip = max_conn + 64;
    if (!max_open) max_open = 4 * per_ip;
    s.max_connections_per_ip = (int)per_ip;
    s.max_open_connections = fit_fd_limit((int)max_open);
    s.idle_timeout_s = (int)idle_s;
    s.request_timeout_s = (int)request_s;
    s.max_prompts = (int)max_prompts;
    s.t_start = now_seconds();
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.work, NULL);
    if (invar_engine_create(m, &cfg, &s.engine, err, sizeof err)) {
        fprintf(stderr, "invar serve: %s\n", err);
        invar_model_free(m);
        cli_spec_free(&spec);
        free(name);
        return EXIT_USAGE;
    }
    if (*invar_engine_device_info(s.engine)) fprintf(stderr, "invar serve: %s\n", invar_engine_device_info(s.engine));
    s.n_ctx = cfg.n_ctx > 0 && cfg.n_ctx < invar_model_n_ctx(m) ? cfg.n_ctx : invar_model_n_ctx(m);
    int rc = EXIT_IO;
    bool engine_up = false, guard_up = false;
    struct MHD_Daemon *d = NULL;
    engine_up = srv_engine_start(&s) == 0;
    if (!engine_up) {
        fprintf(stderr, "invar serve: cannot start the engine thread\n");
        goto out;
    }
    guard_up = srv_guard_start(&s) == 0;
    if (!guard_up) {
        fprintf(stderr, "invar serve: cannot start the connection guard thread\n");
        goto out;
    }
    d = srv_http_start(&s, host, (int)port, err, sizeof err);
    if (!d) {
        fprintf(stderr, "invar serve: %s\n", err);
        goto out;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "invar serve: model %s, listening on http://%s:%u\n", s.model_name, host,
            info ? (unsigned)info->port : (unsigned)port);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "invar serve: signal %d, draining (up to %lld s)\n", sig, (long long)drain_s);
    pthread_mutex_lock(&s.mu);
    s.draining = true;
    pthread_mutex_unlock(&s.mu);
    MHD_socket lfd = MHD_quiesce_daemon(d); /* stop accepting; running connections go on */
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    wait_idle(&s, (double)drain_s);
    pthread_mutex_lock(&s.mu);
    s.cancel_all = true; /* whatever still runs is cancelled */
    pthread_cond_signal(&s.work);
    pthread_mutex_unlock(&s.mu);
    wait_idle(&s, 3.0);
    MHD_stop_daemon(d);
    rc = EXIT_OK;
out:
    if (guard_up) srv_guard_stop(&s); /* after the daemon: no connection is left */
    if (engine_up) srv_engine_stop(&s);
    invar_engine_free(s.engine);
    invar_model_free(m);
    cli_spec_free(&spec);
    free(s.pending);
    free(name);
    if (rc == EXIT_OK) fprintf(stderr, "invar serve: stopped\n");
    return rc;
}
