/* Fixed-size thread pool. Tasks write disjoint outputs, so which thread runs a task
 * cannot change any result: the thread count only changes speed. */
#ifndef INVAR_THREADPOOL_H
#define INVAR_THREADPOOL_H
#include <stdint.h>

typedef struct threadpool threadpool;
typedef void (*threadpool_fn)(void *ctx, int64_t task);

/* n_threads >= 1; the calling thread takes part as one of them. NULL on failure. */
threadpool *threadpool_create(int n_threads);
void threadpool_destroy(threadpool *p);
int threadpool_size(const threadpool *p);
/* Runs fn(ctx, t) once for every t in [0, n_tasks); returns when all are done.
 * p may be NULL (runs serially on the caller). */
void threadpool_run(threadpool *p, threadpool_fn fn, void *ctx, int64_t n_tasks);

#endif
