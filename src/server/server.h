/* invar serve: shared state of the HTTP server, the engine thread and the request objects.
 *
 * Threads: MHD runs one thread per connection; one engine thread owns every call into the
 * engine that changes it (submit, step, cancel, release), so connection threads only touch
 * the server's own objects under srv->mu and never hold that lock while calling the engine. */
#ifndef INVAR_SERVER_H
#define INVAR_SERVER_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "invar.h"

#define SRV_MAX_STOPS 4
#define SRV_MAX_N 128              /* choices per prompt (n, best_of) */
#define SRV_MAX_PROMPTS_LIMIT 4096 /* the most --max-prompts-per-request allows */
#define SRV_LATENCY_BUCKETS 12

struct srv_call;

/* One generated sequence (one OpenAI "choice"); one engine request. */
typedef struct srv_choice {
    struct srv_call *call;
    int index;
    int32_t *prompt;            /* owned */
    int64_t n_prompt;
    invar_sampling samp;
    int64_t engine_id;          /* engine thread only; -1 until submitted */
    /* guarded by srv->mu */
    invar_token_info *toks;     /* tokens reported so far (owned) */
    int64_t n_toks, cap_toks;
    float *plp;                 /* prompt logprobs so far (samp.prompt_logprobs; owned) */
    invar_token_info *plp_top;  /* their top alternatives (with top_logprobs; owned) */
    int64_t n_plp;
    int64_t n_cached;           /* prompt tokens the prefix cache supplied */
    invar_finish finish;        /* NONE while the engine still runs it */
    char error[160];
    bool want_cancel;           /* set by the connection: stop string or client gone */
    bool cancel_sent;           /* engine thread only */
} srv_choice;

/* One HTTP request: n_choices sequences and a condition its connection thread waits on. */
typedef struct srv_call {
    pthread_cond_t cond;
    int n_choices;
    srv_choice *choices;
    int refs;                   /* connection 1 + each choice the engine has not released */
    double t_start;
} srv_call;

struct srv_conn;
typedef struct srv_conn srv_conn;   /* conn_guard.c: one open connection's read deadline */

typedef struct {
    invar_model *model;
    invar_engine *engine;
    invar_spec_mode spec_mode;  /* every request's speculation (command line) */
    int32_t spec_tokens;
    const char *model_name;     /* the GGUF file's basename, invalid UTF-8 replaced by U+FFFD */
    int32_t n_ctx;              /* per-sequence limit the engine enforces */
    int max_connections;        /* completion requests in progress; more get 429 */
    size_t max_body;
    int max_open_connections;   /* sockets; more are refused at accept */
    int max_connections_per_ip;
    int idle_timeout_s;         /* silence on a connection closes it (MHD) */
    int request_timeout_s;      /* a request must arrive whole within this (conn_guard.c) */
    int max_prompts;            /* prompts one completion request may carry */

    pthread_mutex_t mu;
    pthread_cond_t work;        /* engine thread waits here for submissions/cancels */
    srv_choice **pending;       /* submitted by connections, not yet given to the engine */
    int n_pending, cap_pending;
    bool stopping;              /* engine thread exits once no work is left */
    bool draining;              /* SIGTERM: new requests get 503 */
    bool cancel_all;            /* drain deadline passed: cancel everything running */
    bool engine_failed;
    int active_calls;           /* connections holding a call */
    int open_connections;

    /* metrics, guarded by mu */
    int64_t requests_total, requests_failed, requests_cancelled;
    int64_t latency_counts[SRV_LATENCY_BUCKETS + 1];
    double latency_sum;
    double tps_last_t, tps_value;
    int64_t tps_last_tokens;
    double t_start;

    pthread_t engine_thread;

    /* conn_guard.c, guarded by guard_mu */
    pthread_mutex_t guard_mu;
    pthread_cond_t guard_cv;
    srv_conn *conns;
    bool guard_stop;
    int64_t conns_timed_out;
    pthread_t guard_thread;
} srv_state;

extern const double SRV_LATENCY_BOUNDS[SRV_LATENCY_BUCKETS];

/* engine_loop.c */
int srv_engine_start(srv_state *s);
void srv_engine_stop(srv_state *s);     /* after every call is done or cancelled */
/* A new call with n choices (prompts/sampling filled by the caller afterwards); refs = 1. */
srv_call *srv_call_new(int n);
/* Hands every choice to the engine thread. */
void srv_call_submit(srv_state *s, srv_call *c);
/* The connection is done with the call: cancels what still runs, drops its reference. */
void srv_call_finish(srv_state *s, srv_call *c, bool ok, bool cancelled);

/* conn_guard.c: request-read deadlines. A connection is opened, then for each request its
 * request line arrives, the whole request is read (no deadline while it is answered), the
 * response is done (the next request must begin within idle_timeout_s); then closed. */
typedef enum { SRV_CONN_REQUEST_LINE, SRV_CONN_REQUEST_READ, SRV_CONN_RESPONSE_DONE } srv_conn_phase;
int srv_guard_start(srv_state *s);
void srv_guard_stop(srv_state *s);  /* after the daemon has stopped */
srv_conn *srv_guard_open(srv_state *s, int fd);   /* NULL on failure: that connection is unguarded */
void srv_guard_phase(srv_state *s, srv_conn *c, srv_conn_phase p);
void srv_guard_close(srv_state *s, srv_conn *c);

/* metrics.c: Prometheus text; malloc'd. */
char *srv_metrics_text(srv_state *s);

/* http_server.c */
struct MHD_Daemon;
struct MHD_Daemon *srv_http_start(srv_state *s, const char *host, int port, char *err, size_t errlen);

#endif
