/* The engine thread: submits queued choices, steps while there is work, copies new tokens
 * into the choices and wakes their connections; sleeps on srv->work when idle. New requests
 * join the batch at the next step (continuous batching). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "server/server.h"

srv_call *srv_call_new(int n) {
    srv_call *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->choices = calloc((size_t)n, sizeof *c->choices);
    if (!c->choices) {
        free(c);
        return NULL;
    }
    pthread_cond_init(&c->cond, NULL);
    c->n_choices = n;
    c->refs = 1;
    c->t_start = now_seconds();
    for (int i = 0; i < n; i++) {
        c->choices[i].call = c;
        c->choices[i].index = i;
        c->choices[i].engine_id = -1;
        invar_sampling_default(&c->choices[i].samp);
    }
    return c;
}

static void call_free(srv_call *c) {
    for (int i = 0; i < c->n_choices; i++) {
        free(c->choices[i].prompt);
        free(c->choices[i].toks);
        free(c->choices[i].plp);
        free(c->choices[i].plp_top);
    }
    pthread_cond_destroy(&c->cond);
    free(c->choices);
    free(c);
}

/* Caller holds s->mu. */
static void call_unref(srv_call *c) {
    if (--c->refs == 0) call_free(c);
}

void srv_call_submit(srv_state *s, srv_call *c) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < c->n_choices; i++) {
        if (s->n_pending == s->cap_pending) {
            int cap = s->cap_pending ? 2 * s->cap_pending : 64;
            srv_choice **p = realloc(s->pending, sizeof *p * (size_t)cap);
            if (!p) { /* cannot queue: finish it as an error */
                c->choices[i].finish = INVAR_FINISH_ERROR;
                snprintf(c->choices[i].error, sizeof c->choices[i].error, "out of memory");
                continue;
            }
            s->pending = p;
            s->cap_pending = cap;
        }
        c->refs++;
        s->pending[s->n_pending++] = &c->choices[i];
    }
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

void srv_call_finish(srv_state *s, srv_call *c, bool ok, bool cancelled) {
    double dt = now_seconds() - c->t_start;
    pthread_mutex_lock(&s->mu);
    bool any_running = false;
    for (int i = 0; i < c->n_choices; i++)
        if (c->choices[i].finish == INVAR_FINISH_NONE) {
            c->choices[i].want_cancel = true;
            any_running = true;
        }
    if (any_running) pthread_cond_signal(&s->work);
    s->requests_total++;
    if (!ok) s->requests_failed++;
    if (cancelled) s->requests_cancelled++;
    int b = 0;
    while (b < SRV_LATENCY_BUCKETS && dt > SRV_LATENCY_BOUNDS[b]) b++;
    s->latency_counts[b]++;
    s->latency_sum += dt;
    s->active_calls--;
    call_unref(c);
    pthread_mutex_unlock(&s->mu);
}

static void choice_append(srv_choice *ch, const invar_token_info *t, int64_t n) {
    if (ch->n_toks + n > ch->cap_toks) {
        int64_t cap = ch->cap_toks ? ch->cap_toks : 32;
        while (cap < ch->n_toks + n) cap *= 2;
        invar_token_info *p = realloc(ch->toks, sizeof *p * (size_t)cap);
        if (!p) {
            ch->finish = INVAR_FINISH_ERROR;
            snprintf(ch->error, sizeof ch->error, "out of memory");
            return;
        }
        ch->toks = p;
        ch->cap_toks = cap;
    }
    memcpy(ch->toks + ch->n_toks, t, sizeof *t * (size_t)n);
    ch->n_toks += n;
}

/* Copies the prompt logprobs the engine delivered since the last step (row by row as the
 * prefill advances; never more than n_prompt - 1). */
static void choice_append_plp(srv_choice *ch, const invar_result *r) {
    if (r->n_prompt_logprobs <= ch->n_plp) return;
    if (!ch->plp && !(ch->plp = malloc(sizeof(float) * (size_t)(ch->n_prompt - 1)))) {
        ch->finish = INVAR_FINISH_ERROR;
        snprintf(ch->error, sizeof ch->error, "out of memory");
        return;
    }
    const int64_t n_new = r->n_prompt_logprobs - ch->n_plp;
    if (r->prompt_top && !ch->plp_top &&
        !(ch->plp_top = malloc(sizeof(invar_token_info) * (size_t)(ch->n_prompt - 1)))) {
        ch->finish = INVAR_FINISH_ERROR;
        snprintf(ch->error, sizeof ch->error, "out of memory");
        return;
    }
    memcpy(ch->plp + ch->n_plp, r->prompt_logprobs + ch->n_plp, sizeof(float) * (size_t)n_new);
    if (r->prompt_top)
        memcpy(ch->plp_top + ch->n_plp, r->prompt_top + ch->n_plp, sizeof(invar_token_info) * (size_t)n_new);
    ch->n_plp = r->n_prompt_logprobs;
}

static void *engine_main(void *arg) {
    srv_state *s = arg;
    srv_choice **active = NULL, **batch = NULL;
    int n_active = 0, cap_active = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->n_pending && !n_active && !s->stopping) pthread_cond_wait(&s->work, &s->mu);
        if (!s->n_pending && !n_active && s->stopping) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        int n_new = s->n_pending;
        if (n_active + n_new > cap_active) {
            int cap = (n_active + n_new) * 2;
            srv_choice **a = realloc(active, sizeof *a * (size_t)cap);
            if (!a) {
                pthread_mutex_unlock(&s->mu);
                continue; /* retry after the current requests progress */
            }
            active = a;
            cap_active = cap;
        }
        batch = realloc(batch, sizeof *batch * (size_t)(n_new ? n_new : 1));
        if (!batch) n_new = 0;
        else if (n_new > 0) {
            memcpy(batch, s->pending, sizeof *batch * (size_t)n_new);
            memmove(s->pending, s->pending + n_new, sizeof *s->pending * (size_t)(s->n_pending - n_new));
            s->n_pending -= n_new;
        }
        bool cancel_all = s->cancel_all;
        /* Which running choices must be cancelled (read under the lock, acted on outside). */
        for (int i = 0; i < n_active; i++)
            if ((active[i]->want_cancel || cancel_all) && !active[i]->cancel_sent) active[i]->cancel_sent = true;
        for (int i = 0; i < n_new; i++)
            if (batch[i]->want_cancel || cancel_all) batch[i]->cancel_sent = true;
        pthread_mutex_unlock(&s->mu);

        for (int i = 0; i < n_new; i++) {
            srv_choice *ch = batch[i];
            if (ch->cancel_sent) { /* gone before it started */
                pthread_mutex_lock(&s->mu);
                ch->finish = INVAR_FINISH_CANCELLED;
                pthread_cond_broadcast(&ch->call->cond);
                call_unref(ch->call);
                pthread_mutex_unlock(&s->mu);
                continue;
            }
            ch->engine_id = invar_engine_submit(s->engine, ch->prompt, ch->n_prompt, &ch->samp);
            if (ch->engine_id < 0) {
                pthread_mutex_lock(&s->mu);
                ch->finish = INVAR_FINISH_ERROR;
                snprintf(ch->error, sizeof ch->error, "out of memory");
                pthread_cond_broadcast(&ch->call->cond);
                call_unref(ch->call);
                pthread_mutex_unlock(&s->mu);
                continue;
            }
            ch->cancel_sent = false;
            active[n_active++] = ch;
        }
        for (int i = 0; i < n_active; i++)
            if (active[i]->cancel_sent && active[i]->engine_id >= 0) invar_engine_cancel(s->engine, active[i]->engine_id);

        int left = n_active ? invar_engine_step(s->engine) : 0;
        const char *fail = left < 0 ? invar_engine_error(s->engine) : NULL;

        pthread_mutex_lock(&s->mu);
        if (fail) s->engine_failed = true;
        int kept = 0;
        for (int i = 0; i < n_active; i++) {
            srv_choice *ch = active[i];
            invar_result r;
            bool done = false;
            if (invar_engine_result(s->engine, ch->engine_id, &r) == 0) {
                choice_append_plp(ch, &r);
                if (ch->n_cached != r.n_cached_prompt) ch->n_cached = r.n_cached_prompt; /* set once, at start */
                if (r.n_tokens > ch->n_toks) choice_append(ch, r.tokens + ch->n_toks, r.n_tokens - ch->n_toks);
                if (ch->finish == INVAR_FINISH_NONE) ch->finish = r.finish;
                if (r.finish == INVAR_FINISH_ERROR) snprintf(ch->error, sizeof ch->error, "%s", r.error ? r.error : "error");
                done = r.finish != INVAR_FINISH_NONE;
            } else {
                done = true;
                ch->finish = INVAR_FINISH_ERROR;
            }
            if (fail && !done) {
                invar_engine_cancel(s->engine, ch->engine_id);
                ch->finish = INVAR_FINISH_ERROR;
                snprintf(ch->error, sizeof ch->error, "engine failure: %s", fail);
                done = true;
            }
            pthread_cond_broadcast(&ch->call->cond);
            if (done) {
                invar_engine_release(s->engine, ch->engine_id);
                call_unref(ch->call);
            } else {
                active[kept++] = ch;
            }
        }
        n_active = kept;
        pthread_mutex_unlock(&s->mu);
    }
    free(active);
    free(batch);
    return NULL;
}

int srv_engine_start(srv_state *s) {
    return pthread_create(&s->engine_thread, NULL, engine_main, s);
}

void srv_engine_stop(srv_state *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->engine_thread, NULL);
}
