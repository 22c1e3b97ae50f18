/* GET /metrics: Prometheus text format from the engine's counters and the server's own. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"
#include "server/server.h"

const double SRV_LATENCY_BOUNDS[SRV_LATENCY_BUCKETS] = {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120};

typedef struct {
    char *buf;
    size_t len, cap;
} sbuf;

__attribute__((format(printf, 2, 3))) static void put(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = b->buf ? vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        char *p = realloc(b->buf, cap);
        if (!p) return;
        b->buf = p;
        b->cap = cap;
    }
}

static void metric(sbuf *b, const char *name, const char *type, const char *help, double v) {
    put(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

char *srv_metrics_text(srv_state *s) {
    invar_engine_stats st;
    invar_engine_get_stats(s->engine, &st); /* engine lock only: never under s->mu */
    double now = now_seconds();
    sbuf b = {0};
    pthread_mutex_lock(&s->mu);
    /* tokens/s over the interval since the previous sample (at least 1 s apart). */
    if (s->tps_last_t == 0) {
        s->tps_last_t = s->t_start;
        s->tps_last_tokens = 0;
    }
    if (now - s->tps_last_t >= 1.0) {
        s->tps_value = (double)(st.tokens_generated - s->tps_last_tokens) / (now - s->tps_last_t);
        s->tps_last_t = now;
        s->tps_last_tokens = st.tokens_generated;
    }
    metric(&b, "invar_queue_length", "gauge", "Requests waiting to be scheduled.", (double)(st.n_queued + s->n_pending));
    metric(&b, "invar_running_sequences", "gauge", "Sequences being generated.", (double)st.n_running);
    metric(&b, "invar_kv_blocks_total", "gauge", "KV-cache blocks (16 tokens each).", (double)st.kv_blocks_total);
    metric(&b, "invar_kv_blocks_in_use", "gauge", "KV-cache blocks held by running sequences.",
           (double)(st.kv_blocks_total - st.kv_blocks_free));
    metric(&b, "invar_prefix_cache_hit_rate", "gauge", "Prefix-cache blocks hit / looked up.",
           st.prefix_blocks_looked_up ? (double)st.prefix_blocks_hit / (double)st.prefix_blocks_looked_up : 0.0);
    metric(&b, "invar_prefix_cache_blocks_hit_total", "counter", "Prefix-cache blocks hit.", (double)st.prefix_blocks_hit);
    metric(&b, "invar_prefix_cache_blocks_looked_up_total", "counter", "Prefix-cache blocks looked up.",
           (double)st.prefix_blocks_looked_up);
    metric(&b, "invar_preemptions_total", "counter", "Sequences preempted for KV space.", (double)st.preemptions);
    metric(&b, "invar_tokens_computed_total", "counter", "Tokens run through the model.", (double)st.tokens_computed);
    metric(&b, "invar_tokens_generated_total", "counter", "Tokens generated.", (double)st.tokens_generated);
    metric(&b, "invar_spec_drafted_total", "counter", "Drafted tokens verified (speculative decoding).",
           (double)st.spec_drafted);
    metric(&b, "invar_spec_accepted_total", "counter", "Drafted tokens kept: equal to plain decoding's.",
           (double)st.spec_accepted);
    metric(&b, "invar_tokens_per_second", "gauge", "Generated tokens per second since the previous scrape.", s->tps_value);
    metric(&b, "invar_active_requests", "gauge", "HTTP requests in progress.", (double)s->active_calls);
    metric(&b, "invar_open_connections", "gauge", "Open HTTP connections.", (double)s->open_connections);
    metric(&b, "invar_requests_total", "counter", "Completion requests answered.", (double)s->requests_total);
    metric(&b, "invar_requests_failed_total", "counter", "Completion requests that failed.", (double)s->requests_failed);
    metric(&b, "invar_requests_cancelled_total", "counter", "Streams whose client went away.",
           (double)s->requests_cancelled);
    put(&b, "# HELP invar_request_latency_seconds Completion request latency.\n"
            "# TYPE invar_request_latency_seconds histogram\n");
    int64_t cum = 0;
    for (int i = 0; i < SRV_LATENCY_BUCKETS; i++) {
        cum += s->latency_counts[i];
        put(&b, "invar_request_latency_seconds_bucket{le=\"%g\"} %lld\n", SRV_LATENCY_BOUNDS[i], (long long)cum);
    }
    cum += s->latency_counts[SRV_LATENCY_BUCKETS];
    put(&b, "invar_request_latency_seconds_bucket{le=\"+Inf\"} %lld\n", (long long)cum);
    put(&b, "invar_request_latency_seconds_sum %.17g\n", s->latency_sum);
    put(&b, "invar_request_latency_seconds_count %lld\n", (long long)cum);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->guard_mu);
    int64_t timed_out = s->conns_timed_out;
    pthread_mutex_unlock(&s->guard_mu);
    metric(&b, "invar_connections_timed_out_total", "counter",
           "Connections closed for not sending a whole request within --request-timeout-s (or the next one within --idle-timeout-s).",
           (double)timed_out);
    return b.buf;
}
