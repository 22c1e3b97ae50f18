/* Request-read deadlines (slowloris guard). libmicrohttpd's own timeout counts only silence,
 * so a client that sends a header byte every few seconds would hold its connection (and its
 * thread) for ever. Here every open connection has a deadline while it is expected to send a
 * request: a fresh connection must deliver its whole first request (line, headers, body)
 * within request_timeout_s; a kept-alive one must start its next request line within
 * idle_timeout_s of the previous response and then finish it within request_timeout_s. No
 * deadline runs while a request is answered, so long generations and streams are untouched.
 * One thread shuts down the socket of a connection past its deadline: its MHD thread then
 * reads the end of input and closes it. */
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "common/clock.h"
#include "server/server.h"

struct srv_conn {
    struct srv_conn *prev, *next;
    int fd;
    double deadline;            /* now_seconds() clock; 0: none */
    bool between;               /* kept alive, waiting for the next request line */
};

static struct timespec abs_monotonic(double t) {
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    return ts;
}

static void *guard_main(void *arg) {
    srv_state *s = arg;
    pthread_mutex_lock(&s->guard_mu);
    while (!s->guard_stop) {
        double now = now_seconds(), next = now + 1.0;
        for (srv_conn *c = s->conns; c; c = c->next) {
            if (c->deadline <= 0) continue;
            if (c->deadline <= now) {
                /* Safe under guard_mu: MHD closes the fd only after srv_guard_close. */
                shutdown(c->fd, SHUT_RDWR);
                c->deadline = 0;
                s->conns_timed_out++;
            } else if (c->deadline < next) {
                next = c->deadline;
            }
        }
        struct timespec ts = abs_monotonic(next);
        pthread_cond_timedwait(&s->guard_cv, &s->guard_mu, &ts);
    }
    pthread_mutex_unlock(&s->guard_mu);
    return NULL;
}

int srv_guard_start(srv_state *s) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the clock of now_seconds() */
    pthread_mutex_init(&s->guard_mu, NULL);
    pthread_cond_init(&s->guard_cv, &ca);
    pthread_condattr_destroy(&ca);
    return pthread_create(&s->guard_thread, NULL, guard_main, s);
}

void srv_guard_stop(srv_state *s) {
    pthread_mutex_lock(&s->guard_mu);
    s->guard_stop = true;
    pthread_cond_signal(&s->guard_cv);
    pthread_mutex_unlock(&s->guard_mu);
    pthread_join(s->guard_thread, NULL);
    pthread_cond_destroy(&s->guard_cv);
    pthread_mutex_destroy(&s->guard_mu);
}

srv_conn *srv_guard_open(srv_state *s, int fd) {
    srv_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL; /* unguarded; MHD's idle timeout still applies */
    c->fd = fd;
    pthread_mutex_lock(&s->guard_mu);
    c->deadline = now_seconds() + (double)s->request_timeout_s;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    pthread_mutex_unlock(&s->guard_mu);
    return c;
}

void srv_guard_close(srv_state *s, srv_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&s->guard_mu);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&s->guard_mu);
    free(c);
}

void srv_guard_phase(srv_state *s, srv_conn *c, srv_conn_phase p) {
    if (!c) return;
    pthread_mutex_lock(&s->guard_mu);
    double now = now_seconds();
    switch (p) {
    case SRV_CONN_REQUEST_LINE: /* a fresh connection keeps the deadline it got at accept */
        if (c->between) c->deadline = now + (double)s->request_timeout_s;
        c->between = false;
        break;
    case SRV_CONN_REQUEST_READ:
        c->deadline = 0;
        break;
    case SRV_CONN_RESPONSE_DONE:
        c->deadline = now + (double)s->idle_timeout_s;
        c->between = true;
        break;
    }
    pthread_mutex_unlock(&s->guard_mu);
}
