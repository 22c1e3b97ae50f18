/* Fixed-size thread pool for the kernels (~300 runs per forward pass, so the cost of
 * handing out a run matters more than anything else here).
 *
 * Protocol. One 64-bit atomic `state` holds (n_tasks << 32 | next task index). A run
 * stores fn and ctx, then publishes state = (n, 0) with release. Anyone, caller
 * included, takes a task with fetch_add; the returned snapshot gives both the index
 * and the task count of the run it belongs to. If index < n, that run cannot finish
 * (and so fn/ctx cannot be replaced) before this task is done, so fn/ctx read after
 * the fetch_add are the right ones. A worker that arrives late just lands in whatever
 * run is current, or past its end (index >= n: nothing to do). So the caller returns
 * as soon as `done` reaches n, never waiting for a worker that was slow to wake.
 *
 * One run at a time per pool: threadpool_run must not be called concurrently on the
 * same pool, nor from inside one of its tasks.
 *
 * Waiting. Workers spin on `seq` (bumped once per run) for a while, then sleep on it
 * with futex. The caller only issues the wake syscall when someone sleeps
 * (`sleepers`, seq_cst Dekker pairing with seq). */
#include "kernels/cpu/threadpool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
/* Tasks run with the caller's SSE control word (rounding mode, FTZ/DAZ): a result
 * must not depend on which thread ran it, even if the caller changed it after the
 * workers were created. */
#define GET_FPCW() (_mm_getcsr() & ~0x3Fu) /* control bits, not the sticky flags */
#define SET_FPCW(v) _mm_setcsr(v)
#else
#define CPU_RELAX() ((void)0)
#define GET_FPCW() 0u
#define SET_FPCW(v) ((void)(v))
#endif

/* How long an idle worker spins before sleeping: long enough to cover the gaps
 * between kernels of one forward pass, short enough not to burn a core when idle. */
#define SPIN_NS 200000LL

struct threadpool {
    int n_threads;
    pthread_t *workers;
    _Atomic uint64_t state;
    _Atomic uint32_t seq;
    _Atomic int sleepers;
    _Atomic int64_t done;
    _Atomic(threadpool_fn) fn;
    _Atomic(void *) ctx;
    _Atomic unsigned fpcw;
    atomic_bool stop;
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val) {
    return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Takes and runs tasks until the current run has none left. */
static void work(threadpool *p) {
    for (;;) {
        const uint64_t s = atomic_fetch_add_explicit(&p->state, 1, memory_order_acq_rel);
        const uint32_t i = (uint32_t)s, n = (uint32_t)(s >> 32);
        if (i >= n) return;
        threadpool_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        const unsigned cw = atomic_load_explicit(&p->fpcw, memory_order_relaxed);
        if (GET_FPCW() != cw) SET_FPCW(cw);
        fn(ctx, (int64_t)i);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

static void *worker_main(void *arg) {
    threadpool *p = arg;
    /* The value at creation, not a fresh read: a run or a destroy may already have
     * bumped seq before this thread got scheduled, and must not be missed. */
    uint32_t seen = 0;
    for (;;) {
        uint32_t cur = atomic_load_explicit(&p->seq, memory_order_acquire);
        if (cur == seen) {
            int64_t t0 = now_ns();
            unsigned spins = 0;
            while ((cur = atomic_load_explicit(&p->seq, memory_order_acquire)) == seen) {
                CPU_RELAX();
                if ((++spins & 255) == 0 && now_ns() - t0 > SPIN_NS) {
                    atomic_fetch_add(&p->sleepers, 1);
                    if (atomic_load(&p->seq) == seen) futex(&p->seq, FUTEX_WAIT_PRIVATE, seen);
                    atomic_fetch_sub(&p->sleepers, 1);
                    t0 = now_ns();
                }
            }
        }
        seen = cur;
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
        work(p);
    }
}

threadpool *threadpool_create(int n_threads) {
    if (n_threads < 1) return NULL;
    threadpool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->state, 0);
    atomic_init(&p->seq, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->ctx, NULL);
    atomic_init(&p->fpcw, 0);
    atomic_init(&p->stop, false);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) { free(p); return NULL; }
        for (int i = 0; i < n_threads - 1; i++) {
            if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) {
                p->n_threads = i + 1; /* destroy joins the ones that started */
                threadpool_destroy(p);
                return NULL;
            }
        }
    }
    return p;
}

void threadpool_destroy(threadpool *p) {
    if (!p) return;
    atomic_store_explicit(&p->stop, true, memory_order_release);
    atomic_fetch_add(&p->seq, 1);
    futex(&p->seq, FUTEX_WAKE_PRIVATE, INT_MAX);
    for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->workers[i], NULL);
    free(p->workers);
    free(p);
}

int threadpool_size(const threadpool *p) { return p ? p->n_threads : 1; }

void threadpool_run(threadpool *p, threadpool_fn fn, void *ctx, int64_t n_tasks) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++) fn(ctx, i);
        return;
    }
    /* Index lives in 32 bits of state: hand out very large counts in slices. */
    while (n_tasks > (int64_t)INT32_MAX) {
        /* Not reached by the kernels; kept correct rather than fast. */
        for (int64_t i = 0; i < n_tasks - INT32_MAX; i++) fn(ctx, INT32_MAX + i);
        n_tasks = INT32_MAX;
    }
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->fpcw, GET_FPCW(), memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->state, (uint64_t)n_tasks << 32, memory_order_release);
    atomic_fetch_add(&p->seq, 1);
    if (atomic_load(&p->sleepers) > 0) futex(&p->seq, FUTEX_WAKE_PRIVATE, INT_MAX);
    work(p);
    /* The remaining tasks are already running elsewhere. Spin briefly; past that the
     * worker was probably descheduled (more threads than free cores), so give the
     * core away rather than burn the time slice it needs. */
    unsigned spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks) {
        CPU_RELAX();
        if (++spins > 4096) sched_yield();
    }
}
