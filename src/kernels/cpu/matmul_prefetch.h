/* Software prefetch of the weight stream, shared by the AVX2 and AVX-512 kernels (speed
 * only: no prefetch changes a bit). Which of these a one-row K-quant kernel issues is
 * chosen per CPU vendor and ISA by cpu_kq_prefetch (cpu_features.h). */
#ifndef INVAR_MATMUL_PREFETCH_H
#define INVAR_MATMUL_PREFETCH_H
#include <immintrin.h>

/* This far ahead: one core's hardware prefetchers alone left an Intel core's decode (m = 1,
 * bandwidth bound) at ~60% of what this reaches. */
#ifndef PF_DIST
#define PF_DIST 4096
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0
#endif

/* A record PF_DIST ahead into L1, spread over the `parts` steps of its computation (this
 * is step i): a burst of a whole K-quant record's lines before its computation fills the
 * miss buffers and stalls the core. */
#define PF_SPREAD(rec, bytes, i, parts)                                                \
    do {                                                                               \
        const int lines_ = ((bytes) + 63) / 64, per_ = (lines_ + (parts)-1) / (parts); \
        for (int l_ = (i)*per_; l_ < ((i) + 1) * per_ && l_ < lines_; l_++)            \
            _mm_prefetch((const char *)(rec) + PF_DIST + 64 * l_, PF_HINT);            \
    } while (0)

/* Into L2, a record one row of records ahead (the same unit of the next column group, nu *
 * rec bytes on), spread over the `parts` steps of the current record's computation (this
 * is step i). For a DRAM-sized Q3_K stream this read faster than the burst of the whole
 * record PF_DIST ahead into L1 (bench/README.md, 2026-12-07). */
#define PF_ROW(ahead, bytes, i, parts)                                                 \
    do {                                                                               \
        const int lines_ = ((bytes) + 63) / 64, per_ = (lines_ + (parts)-1) / (parts); \
        for (int l_ = (i)*per_; l_ < ((i) + 1) * per_ && l_ < lines_; l_++)            \
            _mm_prefetch((const char *)(ahead) + 64 * l_, _MM_HINT_T1);                \
    } while (0)

#endif
