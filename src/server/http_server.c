/* HTTP layer (libmicrohttpd, one thread per connection): routing, body limits, connection
 * limits, OpenAI error objects, non-streaming responses (the connection thread waits for
 * its call) and server-sent-event streams (the content reader waits for new tokens). */
#include <arpa/inet.h>
#include <errno.h>
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "server/openai_api.h"
#include "server/server.h"

typedef struct {
    char *body;
    size_t len, cap;
    bool too_big;
} conn_ctx;

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *type, char *text) {
    if (!text) {
        text = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        status = 500;
        if (!text) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const api_error *e) {
    return send_text(c, e->status, "application/json", api_error_json(e));
}

static enum MHD_Result send_simple_error(struct MHD_Connection *c, int status, const char *type, const char *code,
                                         const char *msg) {
    api_error e;
    api_error_set(&e, status, type, NULL, code, "%s", msg);
    return send_error(c, &e);
}

/* ---- waiting for tokens ---------------------------------------------------------------- */

/* Caller holds s->mu. Moves new tokens of choice i into its tracker; marks it done when the
 * engine finished it or a stop string appeared (then asks the engine thread to cancel it).
 * Returns true if anything changed. */
static bool consume(srv_state *s, srv_choice *ch, text_tracker *tt, bool *done) {
    if (*done) return false;
    bool progress = false;
    if (ch->n_toks > tt->n_tokens && !tt->stopped) {
        if (!tt_add(tt, s->model, ch->toks + tt->n_tokens, ch->n_toks - tt->n_tokens)) {
            ch->finish = INVAR_FINISH_ERROR;
            snprintf(ch->error, sizeof ch->error, "out of memory");
        }
        progress = true;
    }
    if (tt->stopped || ch->finish != INVAR_FINISH_NONE) {
        *done = true;
        progress = true;
        if (ch->finish == INVAR_FINISH_NONE) {
            ch->want_cancel = true;
            pthread_cond_signal(&s->work);
        }
    }
    return progress;
}

/* What a non-blocking peek at the client's socket says. A FIN (PEER_EOF) is either a client
 * that half-closed after sending its request (it still reads the answer) or one that closed
 * for good: only a write can tell them apart, so that is not yet a reason to cancel. */
enum peer_state { PEER_OPEN, PEER_EOF, PEER_GONE };

static enum peer_state peer_state(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return PEER_OPEN;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return PEER_OPEN;
    if (n == 0) return PEER_EOF;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? PEER_OPEN : PEER_GONE; /* reset */
}

static void wait_call(srv_state *s, srv_call *c, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)(seconds * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&c->cond, &s->mu, &ts);
}

/* ---- non-streaming --------------------------------------------------------------------- */

/* A non-streaming call: its choices' trackers, and the answer once written. */
typedef struct {
    srv_state *s;
    api_request req;
    int n;                          /* choices (the call may be gone when freeing) */
    text_tracker *tt;
    bool *done;
    invar_finish *fin;
    char *body;                     /* the answer (deferred response only) */
    size_t body_len, body_off;
    bool ok, sent;
} blocking_ctx;

static void bc_free(blocking_ctx *b, bool ok, bool cancelled) {
    srv_call_finish(b->s, b->req.call, ok, cancelled); /* may free the call */
    for (int i = 0; b->tt && i < b->n; i++) tt_free(&b->tt[i]);
    free(b->tt), free(b->done), free(b->fin), free(b->body);
    api_request_free(&b->req);
    free(b);
}

static blocking_ctx *bc_new(srv_state *s, api_request *r) {
    blocking_ctx *b = calloc(1, sizeof *b);
    int n = r->call->n_choices;
    if (b) {
        b->s = s;
        b->req = *r;
        b->n = n;
        b->tt = calloc((size_t)n, sizeof *b->tt);
        b->done = calloc((size_t)n, sizeof *b->done);
        b->fin = calloc((size_t)n, sizeof *b->fin);
    }
    if (!b || !b->tt || !b->done || !b->fin) {
        if (b) {
            bc_free(b, false, false);
        } else {
            srv_call_finish(s, r->call, false, false);
            api_request_free(r);
        }
        return NULL;
    }
    for (int i = 0; i < n; i++) tt_init(&b->tt[i], (const char *const *)r->stops, r->n_stops);
    return b;
}

/* Takes in new tokens, waiting up to `seconds` for news; true once every choice is done. */
static bool bc_wait(blocking_ctx *b, double seconds) {
    srv_state *s = b->s;
    srv_call *c = b->req.call;
    int n = c->n_choices;
    bool all = false;
    pthread_mutex_lock(&s->mu);
    for (int attempt = 0; attempt < 2 && !all; attempt++) {
        int n_done = 0;
        for (int i = 0; i < n; i++) {
            consume(s, &c->choices[i], &b->tt[i], &b->done[i]);
            n_done += b->done[i];
        }
        all = n_done == n;
        if (!all && attempt == 0) wait_call(s, c, seconds);
    }
    pthread_mutex_unlock(&s->mu);
    return all;
}

/* The answer of a finished call: the response JSON, or an error object; *status its HTTP status. */
static char *bc_answer(blocking_ctx *b, int *status) {
    srv_state *s = b->s;
    srv_call *c = b->req.call;
    api_error err = {0};
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < c->n_choices; i++) {
        b->fin[i] = c->choices[i].finish;
        if (b->fin[i] == INVAR_FINISH_ERROR && !err.status)
            api_error_set(&err, s->engine_failed ? 500 : 400, s->engine_failed ? "server_error" : "invalid_request_error",
                          NULL, NULL, "%s", c->choices[i].error);
        if (b->fin[i] == INVAR_FINISH_CANCELLED && !b->tt[i].stopped && !err.status)
            api_error_set(&err, 503, "server_error", NULL, "cancelled", "the server is shutting down");
    }
    pthread_mutex_unlock(&s->mu);
    *status = err.status ? err.status : 200;
    return err.status ? api_error_json(&err) : api_response_json(s, &b->req, b->tt, b->fin);
}

/* Deferred answer for a client that sent a FIN: the status line (200) goes out at once and a
 * space (whitespace before a JSON value is allowed) every half second until the answer is
 * ready. A client that only half-closed reads on; one that closed for good answers the
 * first bytes with a reset, the next write fails, MHD drops the connection and
 * deferred_free cancels the call. A late error arrives as the error object in this 200. */
static ssize_t deferred_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    blocking_ctx *b = cls;
    if (!b->body) {
        double t_end = now_seconds() + 0.5; /* one space per half second, not per token */
        bool all;
        while (!(all = bc_wait(b, 0.1)) && now_seconds() < t_end) continue;
        if (!all) {
            buf[0] = ' ';
            return 1;
        }
        int status;
        b->body = bc_answer(b, &status);
        if (!b->body) return MHD_CONTENT_READER_END_WITH_ERROR;
        b->ok = status == 200;
        b->body_len = strlen(b->body);
    }
    if (b->body_off == b->body_len) {
        b->sent = true;
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t k = b->body_len - b->body_off;
    if (k > max) k = max;
    memcpy(buf, b->body + b->body_off, k);
    b->body_off += k;
    return (ssize_t)k;
}

static void deferred_free(void *cls) {
    blocking_ctx *b = cls;
    bc_free(b, b->sent && b->ok, !b->sent);
}

static enum MHD_Result answer_deferred(struct MHD_Connection *conn, blocking_ctx *b) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, deferred_read, b, deferred_free);
    if (!resp) {
        bc_free(b, false, true);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result complete_blocking(srv_state *s, struct MHD_Connection *conn, api_request *r) {
    blocking_ctx *b = bc_new(s, r);
    if (!b) return send_simple_error(conn, 500, "server_error", NULL, "out of memory");
    srv_call_submit(s, b->req.call);
    while (!bc_wait(b, 0.05)) { /* how soon a gone client is noticed */
        enum peer_state ps = peer_state(conn);
        if (ps == PEER_GONE) { /* reset: nobody to answer; cancel and drop the connection */
            bc_free(b, false, true);
            return MHD_NO;
        }
        if (ps == PEER_EOF) return answer_deferred(conn, b);
    }
    int status;
    char *json = bc_answer(b, &status);
    bool ok = json && status == 200;
    enum MHD_Result ret = send_text(conn, status, "application/json", json); /* NULL: 500 */
    bc_free(b, ok, false);
    return ret;
}

/* ---- streaming ------------------------------------------------------------------------- */

typedef struct {
    srv_state *s;
    api_request req;
    text_tracker *tt;
    bool *done, *reported_done, *role_sent;
    int64_t *tok_sent;              /* tokens whose logprobs were sent */
    invar_finish *fin;              /* per choice: stream_produce's snapshot */
    char (*errs)[160];
    int n_reported;
    char *out;
    size_t out_len, out_off, out_cap;
    bool finished;                  /* [DONE] written */
    bool failed;
} stream_ctx;

static void out_append(stream_ctx *sc, const char *a, size_t n) {
    if (sc->out_len + n > sc->out_cap) {
        size_t cap = sc->out_cap ? sc->out_cap : 4096;
        while (cap < sc->out_len + n) cap *= 2;
        char *p = realloc(sc->out, cap);
        if (!p) {
            sc->failed = true;
            return;
        }
        sc->out = p;
        sc->out_cap = cap;
    }
    memcpy(sc->out + sc->out_len, a, n);
    sc->out_len += n;
}

static void out_event(stream_ctx *sc, char *json) {
    if (!json) {
        sc->failed = true;
        return;
    }
    out_append(sc, "data: ", 6);
    out_append(sc, json, strlen(json));
    out_append(sc, "\n\n", 2);
    free(json);
}

/* Waits (bounded) for news, then writes the SSE events it makes. */
static void stream_produce(stream_ctx *sc) {
    srv_state *s = sc->s;
    srv_call *c = sc->req.call;
    int n = c->n_choices;
    bool any = false;
    invar_finish *fin = sc->fin;
    char(*errs)[160] = sc->errs;
    pthread_mutex_lock(&s->mu);
    for (int attempt = 0; attempt < 2 && !any; attempt++) {
        for (int i = 0; i < n; i++) any |= consume(s, &c->choices[i], &sc->tt[i], &sc->done[i]);
        if (!any && attempt == 0) wait_call(s, c, 1.0);
    }
    for (int i = 0; i < n; i++) {
        fin[i] = c->choices[i].finish;
        memcpy(errs[i], c->choices[i].error, sizeof errs[i]);
    }
    pthread_mutex_unlock(&s->mu);
    if (!any) { /* keep-alive comment: also how a vanished client is noticed */
        out_append(sc, ": keep-alive\n\n", 14);
        return;
    }
    for (int i = 0; i < n; i++) {
        if (sc->reported_done[i]) continue;
        text_tracker *tt = &sc->tt[i];
        if (!sc->role_sent[i]) { /* chat: the role first; completions with echo: the prompt */
            if (sc->req.chat) out_event(sc, api_chunk_json(s, &sc->req, i, "", tt, 0, 0, NULL, true));
            else if (sc->req.echo)
                out_event(sc, api_chunk_json(s, &sc->req, i, sc->req.prompt_texts[i / sc->req.n], tt, 0, 0, NULL, false));
            sc->role_sent[i] = true;
        }
        if (sc->done[i] && fin[i] == INVAR_FINISH_ERROR) {
            api_error e;
            api_error_set(&e, 500, "server_error", NULL, NULL, "%s", errs[i]);
            out_event(sc, api_error_json(&e));
            sc->reported_done[i] = true;
            sc->n_reported++;
            continue;
        }
        size_t end = tt_safe_end(tt, sc->done[i]);
        int64_t to = sc->tok_sent[i];
        if (sc->done[i]) to = tt->n_kept;
        else
            while (to < tt->n_kept && tt->tok_start[to] < end) to++;
        if (end > tt->emitted || to > sc->tok_sent[i]) {
            char *delta = tt_text(tt, tt->emitted, end);
            out_event(sc, api_chunk_json(s, &sc->req, i, delta ? delta : "", tt, sc->tok_sent[i], to, NULL, false));
            free(delta);
            tt->emitted = end;
            sc->tok_sent[i] = to;
        }
        if (sc->done[i]) {
            const char *why = fin[i] == INVAR_FINISH_CANCELLED && !tt->stopped ? "cancelled"
                                                                               : api_finish_reason(fin[i], tt->stopped);
            out_event(sc, api_chunk_json(s, &sc->req, i, NULL, tt, 0, 0, why, false));
            sc->reported_done[i] = true;
            sc->n_reported++;
        }
    }
    if (sc->n_reported == n) {
        if (sc->req.include_usage) {
            int64_t p = 0, g = 0, cached = 0;
            pthread_mutex_lock(&s->mu);
            for (int i = 0; i < n; i++) {
                if (i % sc->req.n == 0) p += c->choices[i].n_prompt, cached += c->choices[i].n_cached;
                g += sc->tt[i].n_kept;
            }
            pthread_mutex_unlock(&s->mu);
            out_event(sc, api_usage_chunk_json(s, &sc->req, p, g, cached));
        }
        out_append(sc, "data: [DONE]\n\n", 14);
        sc->finished = true;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *sc = cls;
    while (sc->out_off == sc->out_len) {
        if (sc->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (sc->failed) return MHD_CONTENT_READER_END_WITH_ERROR;
        sc->out_len = sc->out_off = 0;
        stream_produce(sc);
    }
    size_t k = sc->out_len - sc->out_off;
    if (k > max) k = max;
    memcpy(buf, sc->out + sc->out_off, k);
    sc->out_off += k;
    return (ssize_t)k;
}

/* Called when the response is destroyed: the stream ended or the client went away. */
static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    int n = sc->req.call->n_choices;
    srv_call_finish(sc->s, sc->req.call, !sc->failed && sc->finished, !sc->finished); /* may free the call */
    for (int i = 0; i < n; i++) tt_free(&sc->tt[i]);
    free(sc->tt), free(sc->done), free(sc->reported_done), free(sc->role_sent), free(sc->tok_sent), free(sc->fin),
        free(sc->errs);
    free(sc->out);
    api_request_free(&sc->req);
    free(sc);
}

static enum MHD_Result complete_streaming(srv_state *s, struct MHD_Connection *conn, api_request *r) {
    int n = r->call->n_choices;
    stream_ctx *sc = calloc(1, sizeof *sc);
    if (sc) {
        sc->tt = calloc((size_t)n, sizeof *sc->tt);
        sc->done = calloc((size_t)n, sizeof(bool));
        sc->reported_done = calloc((size_t)n, sizeof(bool));
        sc->role_sent = calloc((size_t)n, sizeof(bool));
        sc->tok_sent = calloc((size_t)n, sizeof(int64_t));
        sc->fin = calloc((size_t)n, sizeof *sc->fin);
        sc->errs = calloc((size_t)n, sizeof *sc->errs);
    }
    if (!sc || !sc->tt || !sc->done || !sc->reported_done || !sc->role_sent || !sc->tok_sent || !sc->fin || !sc->errs) {
        if (sc)
            free(sc->tt), free(sc->done), free(sc->reported_done), free(sc->role_sent), free(sc->tok_sent),
                free(sc->fin), free(sc->errs);
        free(sc);
        srv_call_finish(s, r->call, false, false);
        api_request_free(r);
        return send_simple_error(conn, 500, "server_error", NULL, "out of memory");
    }
    sc->s = s;
    sc->req = *r;
    for (int i = 0; i < n; i++) tt_init(&sc->tt[i], (const char *const *)r->stops, r->n_stops);
    srv_call_submit(s, r->call);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sc, stream_free);
    if (!resp) {
        stream_free(sc);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* The connection's read deadline (conn_guard.c), set up in on_connection. */
static srv_conn *guard_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* ---- routes ---------------------------------------------------------------------------- */

static enum MHD_Result handle_completion(srv_state *s, struct MHD_Connection *conn, conn_ctx *cc, bool chat) {
    pthread_mutex_lock(&s->mu);
    bool draining = s->draining;
    bool too_many = s->active_calls >= s->max_connections;
    if (!draining && !too_many) s->active_calls++;
    pthread_mutex_unlock(&s->mu);
    if (draining) return send_simple_error(conn, 503, "server_error", "shutting_down", "the server is shutting down");
    if (too_many)
        return send_simple_error(conn, 429, "rate_limit_error", "too_many_requests",
                                 "too many concurrent requests; retry later");
    api_request r;
    api_error e;
    if (api_parse(s, cc->body ? cc->body : "", cc->len, chat, &r, &e)) {
        pthread_mutex_lock(&s->mu);
        s->active_calls--;
        s->requests_total++;
        s->requests_failed++;
        pthread_mutex_unlock(&s->mu);
        return send_error(conn, &e);
    }
    return r.stream ? complete_streaming(s, conn, &r) : complete_blocking(s, conn, &r);
}

/* One model object; cJSON escapes the name (a file name may hold quotes or backslashes). */
static cJSON *model_object(const srv_state *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "invar");
    return m;
}

static char *print_delete(cJSON *o) {
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

static char *models_json(srv_state *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_object(s));
    return print_delete(o);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_state *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_big && cc->len + *upload_size > s->max_body) cc->too_big = true;
        if (!cc->too_big) {
            if (cc->len + *upload_size + 1 > cc->cap) {
                size_t cap = cc->cap ? cc->cap : 4096;
                while (cap < cc->len + *upload_size + 1) cap *= 2;
                char *p = realloc(cc->body, cap);
                if (!p) return MHD_NO;
                cc->body = p;
                cc->cap = cap;
            }
            memcpy(cc->body + cc->len, upload, *upload_size);
            cc->len += *upload_size;
            cc->body[cc->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    srv_guard_phase(s, guard_of(conn), SRV_CONN_REQUEST_READ); /* whole request in: answering takes what it takes */
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (cc->too_big)
        return send_simple_error(conn, 413, "invalid_request_error", "body_too_large", "the request body is too large");
    if (!strcmp(url, "/health")) {
        pthread_mutex_lock(&s->mu);
        bool ok = !s->draining && !s->engine_failed;
        pthread_mutex_unlock(&s->mu);
        return send_text(conn, ok ? 200 : 503, "application/json",
                         strdup(ok ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}"));
    }
    if (!strcmp(url, "/metrics") && get)
        return send_text(conn, 200, "text/plain; version=0.0.4; charset=utf-8", srv_metrics_text(s));
    if (!strcmp(url, "/v1/models") && get) return send_text(conn, 200, "application/json", models_json(s));
    if (!strncmp(url, "/v1/models/", 11) && get) {
        if (strcmp(url + 11, s->model_name) && strcmp(url + 11, "default"))
            return send_simple_error(conn, 404, "invalid_request_error", "model_not_found", "no such model");
        return send_text(conn, 200, "application/json", print_delete(model_object(s)));
    }
    bool is_cmpl = !strcmp(url, "/v1/completions"), is_chat = !strcmp(url, "/v1/chat/completions");
    if (is_cmpl || is_chat) {
        if (!post) return send_simple_error(conn, 405, "invalid_request_error", "method_not_allowed", "use POST");
        return handle_completion(s, conn, cc, is_chat);
    }
    return send_simple_error(conn, 404, "invalid_request_error", "not_found", "no such endpoint");
}

/* Called once the request line is in, before the headers. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *conn) {
    (void)uri;
    srv_guard_phase(cls, guard_of(conn), SRV_CONN_REQUEST_LINE);
    return NULL;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    srv_guard_phase(cls, guard_of(conn), SRV_CONN_RESPONSE_DONE);
    conn_ctx *cc = *con_cls;
    if (cc) {
        free(cc->body);
        free(cc);
        *con_cls = NULL;
    }
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_ctx, enum MHD_ConnectionNotificationCode toe) {
    srv_state *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_ctx = ci ? srv_guard_open(s, ci->connect_fd) : NULL;
    } else {
        srv_guard_close(s, *socket_ctx); /* before MHD closes the socket */
        *socket_ctx = NULL;
    }
    pthread_mutex_lock(&s->mu);
    s->open_connections += toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1;
    pthread_mutex_unlock(&s->mu);
}

struct MHD_Daemon *srv_http_start(srv_state *s, const char *host, int port, char *err, size_t errlen) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "bad --host '%s' (an IPv4 address)", host);
        return NULL;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC | MHD_USE_POLL;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_URI_LOG_CALLBACK, on_request_line, s,
        /* Past these MHD refuses connections at accept: one address cannot take them all. */
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->max_open_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)s->max_connections_per_ip,
        /* Silence only: a running request is never idle (streams send a keep-alive each second). */
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->idle_timeout_s, MHD_OPTION_END);
    if (!d) snprintf(err, errlen, "cannot listen on %s:%d", host, port);
    return d;
}
