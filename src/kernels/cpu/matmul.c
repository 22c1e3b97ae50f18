/* cpu_matmul entry points: weight validation and repacking, activation quantisation,
 * work split over column chunks, ISA dispatch, and the split-K negative control.
 *
 * Work split. Tasks are fixed chunks of output columns (independent of the thread
 * count); any thread may run any chunk, and every y[i][j] is computed entirely inside
 * one task by the per-element sequence described in matmul_scalar.c. So neither the
 * thread count nor m nor the row blocking inside a kernel can change a bit. */
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#include "formats/quant.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"

#define FCOLS_PER_TASK 48   /* columns of a float matrix per task: the AVX-512 tile's 3 groups */
_Static_assert(FCOLS_PER_TASK % MM_NC == 0, "float tasks cover whole column groups");
#define QUANT_ROWS_PER_TASK 16
_Static_assert(QUANT_ROWS_PER_TASK % MM_PR == 0, "quantisation tasks cover whole panels");

int mm_is_quantised(uint32_t type) {
    switch (type) {
    case INVAR_T_Q4_0: case INVAR_T_Q4_1: case INVAR_T_Q8_0: case INVAR_T_Q4_K: case INVAR_T_Q6_K:
        return 1;
    default: return 0;
    }
}

int mm_panel_type(uint32_t type) {
    return type == INVAR_T_Q4_0 || type == INVAR_T_Q4_1 || type == INVAR_T_Q8_0;
}

int64_t mm_unit_elems(uint32_t type) {
    switch (type) {
    case INVAR_T_Q4_0: case INVAR_T_Q4_1: case INVAR_T_Q8_0: return 32;
    case INVAR_T_Q4_K: case INVAR_T_Q6_K: return 256;
    default: return 1;
    }
}

size_t mm_rec_bytes(uint32_t type) {
    switch (type) {
    case INVAR_T_Q4_0: return MM_REC_Q4_0;
    case INVAR_T_Q4_1: return MM_REC_Q4_1;
    case INVAR_T_Q8_0: return MM_REC_Q8_0;
    case INVAR_T_Q4_K: return MM_REC_Q4_K;
    case INVAR_T_Q6_K: return MM_REC_Q6_K;
    case INVAR_T_F32: case INVAR_T_F16: case INVAR_T_BF16: return MM_FREC(type);
    default: return 0;
    }
}

/* Bytes of one original weight unit (block). */
static size_t unit_bytes(uint32_t type) {
    switch (type) {
    case INVAR_T_F32: return 4;
    case INVAR_T_F16: case INVAR_T_BF16: return 2;
    case INVAR_T_Q4_0: return sizeof(block_q4_0);
    case INVAR_T_Q4_1: return sizeof(block_q4_1);
    case INVAR_T_Q8_0: return sizeof(block_q8_0);
    case INVAR_T_Q4_K: return sizeof(block_q4_K);
    case INVAR_T_Q6_K: return sizeof(block_q6_K);
    default: return 0;
    }
}

/* Copies 4-byte word `wi` of column c's quant bytes to its transposed slot. */
static void put_word(uint8_t *rec, int wi, int c, const uint8_t *src) {
    memcpy(rec + 64 * wi + 4 * c, src + 4 * wi, 4);
}

static void put_u16(uint8_t *rec, size_t off, int c, uint16_t v) {
    memcpy(rec + off + 2 * (size_t)c, &v, 2);
}

/* Fills one record from the unit-u blocks of the (up to 16) rows of one group. */
static void pack_record(uint32_t type, uint8_t *rec, const uint8_t *const *rows, int ncols,
                        int64_t u) {
    for (int c = 0; c < ncols; c++) {
        switch (type) {
        case INVAR_T_Q4_0: {
            const block_q4_0 *B = (const block_q4_0 *)rows[c] + u;
            for (int wi = 0; wi < 4; wi++) put_word(rec, wi, c, B->qs);
            put_u16(rec, 256, c, B->d);
            break;
        }
        case INVAR_T_Q4_1: {
            const block_q4_1 *B = (const block_q4_1 *)rows[c] + u;
            for (int wi = 0; wi < 4; wi++) put_word(rec, wi, c, B->qs);
            put_u16(rec, 256, c, B->d);
            put_u16(rec, 288, c, B->m);
            break;
        }
        case INVAR_T_Q8_0: {
            const block_q8_0 *B = (const block_q8_0 *)rows[c] + u;
            for (int wi = 0; wi < 8; wi++) put_word(rec, wi, c, (const uint8_t *)B->qs);
            put_u16(rec, 512, c, B->d);
            break;
        }
        case INVAR_T_Q4_K: {
            const block_q4_K *B = (const block_q4_K *)rows[c] + u;
            for (int wi = 0; wi < 32; wi++) put_word(rec, wi, c, B->qs);
            put_u16(rec, 2048, c, B->d);
            put_u16(rec, 2080, c, B->dmin);
            for (int j = 0; j < 8; j++) {
                int sc, mn;
                if (j < 4) {
                    sc = B->scales[j] & 63;
                    mn = B->scales[j + 4] & 63;
                } else {
                    sc = (B->scales[j + 4] & 0xF) | ((B->scales[j - 4] >> 6) << 4);
                    mn = (B->scales[j + 4] >> 4) | ((B->scales[j] >> 6) << 4);
                }
                rec[2112 + 16 * j + c] = (uint8_t)sc;
                rec[2240 + 16 * j + c] = (uint8_t)mn;
            }
            break;
        }
        case INVAR_T_Q6_K: {
            const block_q6_K *B = (const block_q6_K *)rows[c] + u;
            for (int wi = 0; wi < 32; wi++) put_word(rec, wi, c, B->ql);
            for (int wi = 0; wi < 16; wi++) put_word(rec + 2048, wi, c, B->qh);
            for (int s = 0; s < 16; s++) rec[3072 + 16 * s + c] = (uint8_t)B->scales[s];
            put_u16(rec, 3328, c, B->d);
            break;
        }
        default: break;
        }
    }
}

int cpu_weight_view(cpu_weight *w, uint32_t type, int64_t n, int64_t k, const void *data,
                    char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    const size_t ub = unit_bytes(type);
    if (!ub) {
        snprintf(err, errlen, "matmul: unsupported weight type %u", (unsigned)type);
        return 1;
    }
    const int64_t ue = mm_unit_elems(type);
    if (n <= 0 || k <= 0 || k % ue != 0 || n > ((int64_t)1 << 40) || k > ((int64_t)1 << 30)) {
        snprintf(err, errlen, "matmul: bad shape n=%lld k=%lld (k must be a multiple of %lld)",
                 (long long)n, (long long)k, (long long)ue);
        return 1;
    }
    if (!data) {
        snprintf(err, errlen, "matmul: no weight data");
        return 1;
    }
    w->type = type;
    w->n = n;
    w->k = k;
    w->data = data;
    w->row_bytes = (size_t)(k / ue) * ub;
    return 0;
}

int cpu_weight_pack(cpu_weight *w, char *err, size_t errlen) {
    if (w->packed) return 0;
    const uint32_t type = w->type;
    const int64_t n = w->n, k = w->k, ue = mm_unit_elems(type);
    const size_t ub = unit_bytes(type);
    const void *data = w->data;
    const size_t rb = mm_rec_bytes(type);
    const int64_t ngroups = (n + MM_NC - 1) / MM_NC, nu = k / ue;
    const size_t bytes = (size_t)ngroups * (size_t)nu * rb;
    /* Large matrices (the output head) on transparent huge pages where the kernel
     * allows it: fewer TLB misses while streaming. Small ones would waste memory. */
    const size_t huge = (size_t)2 << 20, align = bytes >= 4 * huge ? huge : 64;
    const size_t alloc = (bytes + align - 1) / align * align;
    uint8_t *p = aligned_alloc(align, alloc);
    if (p && align == huge) madvise(p, alloc, MADV_HUGEPAGE);
    if (!p) {
        snprintf(err, errlen, "matmul: out of memory repacking %zu bytes", bytes);
        return 1;
    }
    memset(p, 0, bytes); /* padded columns: zero quants and scales */
    if (!mm_is_quantised(type)) { /* float: for each k, the group's 16 values side by side */
        for (int64_t j = 0; j < n; j++) {
            const uint8_t *row = (const uint8_t *)data + (size_t)j * w->row_bytes;
            uint8_t *dst = p + (size_t)(j / MM_NC) * (size_t)k * rb + (size_t)(j % MM_NC) * ub;
            if (ub == 2) /* fixed-size copies: inlined, not a libc call per value */
                for (int64_t kk = 0; kk < k; kk++) memcpy(dst + (size_t)kk * rb, row + 2 * (size_t)kk, 2);
            else
                for (int64_t kk = 0; kk < k; kk++) memcpy(dst + (size_t)kk * rb, row + 4 * (size_t)kk, 4);
        }
        w->packed = p;
        w->packed_bytes = bytes;
        return 0;
    }
    for (int64_t g = 0; g < ngroups; g++) {
        const uint8_t *rows[MM_NC];
        int ncols = 0;
        for (int c = 0; c < MM_NC && g * MM_NC + c < n; c++, ncols++)
            rows[c] = (const uint8_t *)data + (size_t)(g * MM_NC + c) * w->row_bytes;
        for (int64_t u = 0; u < nu; u++)
            pack_record(type, p + ((size_t)g * (size_t)nu + (size_t)u) * rb, rows, ncols, u);
    }
    w->packed = p;
    w->packed_bytes = bytes;
    return 0;
}

int cpu_weight_init(cpu_weight *w, uint32_t type, int64_t n, int64_t k, const void *data,
                    char *err, size_t errlen) {
    if (cpu_weight_view(w, type, n, k, data, err, errlen)) return 1;
    return cpu_weight_pack(w, err, errlen);
}

void cpu_weight_free(cpu_weight *w) {
    if (!w) return;
    free(w->packed);
    w->packed = NULL;
    w->packed_bytes = 0;
}

static size_t align64(size_t v) { return (v + 63) / 64 * 64; }


size_t cpu_matmul_scratch_bytes(const cpu_weight *w, int64_t m) {
    if (m <= 0) return 0;
    if (!mm_is_quantised(w->type)) return 0;
    const size_t nb = (size_t)(w->k / MM_QK);
    return 64 + align64((size_t)m * (size_t)w->k) + align64((size_t)m * nb * sizeof(float)) +
           align64((size_t)m * nb * 2 * sizeof(int16_t));
}

static mm_xq carve_xq(const cpu_weight *w, int64_t m, void *scratch) {
    uintptr_t p = ((uintptr_t)scratch + 63) & ~(uintptr_t)63;
    const size_t nb = (size_t)(w->k / MM_QK);
    mm_xq xq;
    xq.nb = (int64_t)nb;
    xq.q = (int8_t *)p;
    p += align64((size_t)m * (size_t)w->k);
    xq.d = (float *)p;
    p += align64((size_t)m * nb * sizeof(float));
    xq.s = (int16_t *)p;
    return xq;
}

typedef struct {
    const mm_args *a;
    cpu_isa isa;
} mm_task;

static void quantize_rows(const mm_args *a, cpu_isa isa, int64_t i0, int64_t i1) {
    const int64_t k = a->w->k, nb = a->xq.nb;
    if (a->xp) { /* panels; i0 is a multiple of MM_PR */
        for (int64_t p0 = i0; p0 < i1; p0 += MM_PR) {
            const int R = (int)(a->m - p0 < MM_PR ? a->m - p0 : MM_PR);
            mm_quantize_panel_avx512(a->w->type, a->x + p0 * a->ldx, a->ldx, R, k,
                                     a->xp + (size_t)p0 * (size_t)nb * MM_PB);
        }
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        const float *x = a->x + i * a->ldx;
        int8_t *q = a->xq.q + i * k;
        float *d = a->xq.d + i * nb;
        int16_t *s = a->xq.s + i * 2 * nb;
        if (isa == CPU_ISA_AVX512) mm_quantize_row_avx512(x, k, q, d, s);
        else if (isa == CPU_ISA_AVX2) mm_quantize_row_avx2(x, k, q, d, s);
        else mm_quantize_row_scalar(x, k, q, d, s);
    }
}

static void task_quantize(void *ctx, int64_t t) {
    const mm_task *T = ctx;
    int64_t i0 = t * QUANT_ROWS_PER_TASK, i1 = i0 + QUANT_ROWS_PER_TASK;
    quantize_rows(T->a, T->isa, i0, i1 < T->a->m ? i1 : T->a->m);
}

/* 16-column groups per task, from n alone: about 16 tasks (enough to balance a few
 * threads, few enough that handing them out stays cheap), at most 16 groups. */
static int64_t groups_per_task(int64_t ngroups) {
    int64_t g = ngroups / 16;
    return g < 1 ? 1 : g > 16 ? 16 : g;
}

/* Column tasks of one weight: fixed chunks of output columns, from n alone. */
static int64_t column_tasks(const cpu_weight *w) {
    if (!mm_is_quantised(w->type)) return (w->n + FCOLS_PER_TASK - 1) / FCOLS_PER_TASK;
    const int64_t ngroups = (w->n + MM_NC - 1) / MM_NC, gpt = groups_per_task(ngroups);
    return (ngroups + gpt - 1) / gpt;
}

static void run_column_task(const mm_args *a, cpu_isa isa, int64_t t) {
    const cpu_weight *w = a->w;
    if (mm_is_quantised(w->type)) {
        const int64_t ngroups = (w->n + MM_NC - 1) / MM_NC, gpt = groups_per_task(ngroups);
        const int64_t g0 = t * gpt, g1 = g0 + gpt < ngroups ? g0 + gpt : ngroups;
        if (isa == CPU_ISA_AVX512) mm_quant_avx512(a, g0, g1);
        else if (isa == CPU_ISA_AVX2) mm_quant_avx2(a, g0, g1);
        else mm_quant_scalar(a, g0, g1);
    } else {
        const int64_t j0 = t * FCOLS_PER_TASK, j1 = j0 + FCOLS_PER_TASK < w->n ? j0 + FCOLS_PER_TASK : w->n;
        if (isa == CPU_ISA_AVX512) mm_float_avx512(a, j0, j1);
        else if (isa == CPU_ISA_AVX2) mm_float_avx2(a, j0, j1);
        else mm_float_scalar(a, j0, j1);
    }
}

/* Brings a's activations into the form the quantised kernels read, in scratch: int8 rows
 * or panels (float kernels read x as it is). Row-local, so splitting rows over threads
 * cannot change any bit. */
static void prepare_activations(threadpool *tp, mm_args *a, cpu_isa isa, void *scratch) {
    const cpu_weight *w = a->w;
    const int64_t m = a->m, row_tasks = (m + QUANT_ROWS_PER_TASK - 1) / QUANT_ROWS_PER_TASK;
    if (mm_is_quantised(w->type)) {
        a->xq = carve_xq(w, m, scratch);
        if (isa == CPU_ISA_AVX512 && mm_panel_type(w->type)) a->xp = (uint8_t *)a->xq.q;
        mm_task T = {a, isa};
        if (m * w->k >= 32768) threadpool_run(tp, task_quantize, &T, row_tasks);
        else quantize_rows(a, isa, 0, m);
    }
}

static void init_args(mm_args *a, const cpu_weight *w, const float *x, int64_t m, int64_t ldx,
                      float *y, int64_t ldy) {
    memset(a, 0, sizeof *a);
    a->w = w;
    a->m = m;
    a->x = x;
    a->ldx = ldx;
    a->y = y;
    a->ldy = ldy;
}

/* Several weights over the same activations: one pool run whose tasks are the column
 * tasks of every weight in turn. */
typedef struct {
    const mm_args *a;
    const int64_t *first; /* first[i]: index of weight i's first task; first[nw]: total */
    int nw;
    cpu_isa isa;
} multi_task;

static void task_columns(void *ctx, int64_t t) {
    const multi_task *M = ctx;
    int i = 0;
    while (t >= M->first[i + 1]) i++;
    run_column_task(&M->a[i], M->isa, t - M->first[i]);
}

void cpu_matmul(threadpool *tp, const cpu_weight *w, const float *x, int64_t m, int64_t ldx,
                float *y, int64_t ldy, void *scratch) {
    cpu_matmul_multi(tp, 1, &w, x, m, ldx, &y, &ldy, scratch);
}

void cpu_matmul_multi(threadpool *tp, int nw, const cpu_weight *const *w, const float *x, int64_t m,
                      int64_t ldx, float *const *y, const int64_t *ldy, void *scratch) {
    if (m <= 0 || nw <= 0) return;
    /* The activations are prepared once only for weights that read them in the same form. */
    int shared = nw <= CPU_MATMUL_MAX_MULTI;
    for (int i = 1; i < nw && shared; i++) shared = w[i]->type == w[0]->type && w[i]->k == w[0]->k;
    if (!shared) {
        for (int j = 0; j < nw; j++) cpu_matmul_multi(tp, 1, &w[j], x, m, ldx, &y[j], &ldy[j], scratch);
        return;
    }
    const cpu_isa isa = cpu_isa_active();
    mm_args a[CPU_MATMUL_MAX_MULTI];
    int64_t first[CPU_MATMUL_MAX_MULTI + 1];
    init_args(&a[0], w[0], x, m, ldx, y[0], ldy[0]);
    prepare_activations(tp, &a[0], isa, scratch);
    first[0] = 0;
    for (int i = 0; i < nw; i++) {
        if (i > 0) {
            a[i] = a[0];
            a[i].w = w[i];
            a[i].y = y[i];
            a[i].ldy = ldy[i];
        }
        first[i + 1] = first[i] + column_tasks(w[i]);
    }
    multi_task M = {a, first, nw, isa};
    threadpool_run(tp, task_columns, &M, first[nw]);
}

/* ---- Negative control: NOT batch-invariant on purpose (tests only). ---- */

typedef struct {
    const mm_args *a;
    int splits;
} splitk_task;

/* The reference unit sequence over K split into `splits` contiguous ranges, the parts
 * added at the end: the same products as cpu_matmul, grouped differently for
 * different m. */
static void task_splitk(void *ctx, int64_t j) {
    const splitk_task *T = ctx;
    const mm_args *a = T->a;
    const cpu_weight *w = a->w;
    const void *wrow = (const uint8_t *)w->data + j * w->row_bytes;
    const int64_t ue = mm_unit_elems(w->type), nu = w->k / ue, nb = a->xq.nb;
    for (int64_t i = 0; i < a->m; i++) {
        float total = 0.0f;
        for (int s = 0; s < T->splits; s++) {
            const int64_t u0 = nu * s / T->splits, u1 = nu * (s + 1) / T->splits;
            float part = 0.0f;
            for (int64_t u = u0; u < u1; u++) {
                if (mm_is_quantised(w->type)) {
                    part = mm_unit_accum_scalar(w->type, wrow, u, a->xq.q + i * w->k,
                                                a->xq.d + i * nb, a->xq.s + i * 2 * nb, part);
                } else {
                    const float *xr = a->x + i * a->ldx;
                    float wv;
                    if (w->type == INVAR_T_F32) wv = ((const float *)wrow)[u];
                    else if (w->type == INVAR_T_F16) wv = fp16_to_f32(((const uint16_t *)wrow)[u]);
                    else wv = bf16_to_f32(((const uint16_t *)wrow)[u]);
                    part = part + xr[u] * wv;
                }
            }
            total = total + part;
        }
        a->y[i * a->ldy + j] = total;
    }
}

void cpu_matmul_splitk_by_m(threadpool *tp, const cpu_weight *w, const float *x, int64_t m,
                            int64_t ldx, float *y, int64_t ldy, void *scratch) {
    if (m <= 0) return;
    mm_args a;
    init_args(&a, w, x, m, ldx, y, ldy);
    if (mm_is_quantised(w->type)) {
        a.xq = carve_xq(w, m, scratch);
        quantize_rows(&a, CPU_ISA_SCALAR, 0, m);
    }
    splitk_task T = {&a, 1 + (int)(m % 7)};
    threadpool_run(tp, task_splitk, &T, w->n);
}
