/* Helpers shared by the CUDA device tests and the benchmark (plain C host code). */
#ifndef INVAR_CUDA_TEST_UTIL_H
#define INVAR_CUDA_TEST_UTIL_H
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SKIP_CODE 77

/* Aborts the program with file:line when a CUDA runtime call fails. */
#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(2);                                                                          \
        }                                                                                     \
    } while (0)
/* Same for invar_cuda_* calls (ctx in scope). */
#define CKI(call)                                                                             \
    do {                                                                                      \
        int r_ = (call);                                                                      \
        if (r_ != 0) {                                                                        \
            fprintf(stderr, "%s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #call, r_,          \
                    invar_cuda_last_error(ctx));                                              \
            exit(2);                                                                          \
        }                                                                                     \
    } while (0)

uint16_t f2bf(float f);            /* round to nearest even */
float bf2f(uint16_t b);
uint64_t rng_next(uint64_t *s);    /* xorshift64* */
float rng_uniform(uint64_t *s);    /* [-1, 1) */
void fill_bf16(uint16_t *p, size_t n, uint64_t seed, float scale);
void *dmalloc(size_t bytes);
void *upload(const void *host, size_t bytes);
void *download(const void *dev, size_t bytes); /* malloc'd host copy */
double now_s(void);
/* Relative Frobenius error of out against ref. */
double rel_err(const double *out, const double *ref, size_t n);

/* Records a failed check and goes on; the including test defines `static int failures`. */
#define EXPECT(cond, ...)                 \
    do {                                  \
        if (!(cond)) {                    \
            printf("FAIL: " __VA_ARGS__); \
            printf("\n");                 \
            failures++;                   \
        }                                 \
    } while (0)

#endif
