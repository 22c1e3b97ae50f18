/* Shared declarations of the CUDA benchmark's sections. */
#ifndef INVAR_BENCH_CUDA_H
#define INVAR_BENCH_CUDA_H
#include <stdio.h>
#include "cuda_test_util.h"
#include "invar_cuda.h"
#include "kernels/cuda/invar_cuda_testing.h"

typedef void (*bench_fn)(void *arg);
double bench_time_ms(bench_fn fn, void *arg, int reps);
invar_cuda_ctx *bench_ctx(void);
void bench_rows(FILE *js, double copy_gbs);
void bench_attention(FILE *js);

#endif
