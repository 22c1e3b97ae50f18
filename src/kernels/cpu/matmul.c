/* cpu_matmul entry points: weight validation and repacking (the records per type are
 * matmul_pack.c's), activation quantisation, work split over column chunks, ISA
 * dispatch, and the split-K negative control. Every type-dependent choice here reads the
 * weight's row of the kernel table (matmul_traits.c), looked up once per call.
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

int cpu_weight_view(cpu_weight *w, uint32_t type, int64_t n, int64_t k, const void *data,
                    char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    const mm_kernel *kt = mm_kernel_of(type);
    if (!kt) { /* the one place an unsupported weight type is refused */
        snprintf(err, errlen, "matmul: unsupported weight type %s (ggml type %u)", quant_type_name(type),
                 (unsigned)type);
        return 1;
    }
    const int64_t ue = kt->q->block_elems;
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
    w->row_bytes = (size_t)(k / ue) * kt->q->block_bytes;
    return 0;
}

int cpu_matmul_supports(uint32_t type) { return mm_kernel_of(type) != NULL; }

int cpu_weight_pack(cpu_weight *w, char *err, size_t errlen) {
    if (w->packed) return 0;
    const mm_kernel *kt = mm_kernel_of(w->type);
    if (!kt) {
        snprintf(err, errlen, "matmul: weight not initialised by cpu_weight_view");
        return 1;
    }
    const int64_t n = w->n, k = w->k, ue = kt->q->block_elems;
    const size_t ub = kt->q->block_bytes;
    const void *data = w->data;
    const size_t rb = kt->rec_bytes;
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
    if (!kt->quantised) { /* float: for each k, the group's 16 values side by side */
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
            kt->pack(p + ((size_t)g * (size_t)nu + (size_t)u) * rb, rows, ncols, u);
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
    const mm_kernel *kt = mm_kernel_of(w->type);
    if (m <= 0 || !kt || !kt->quantised) return 0;
    const size_t nb = (size_t)(w->k / MM_QK);
    /* The row layout; the panels take as much, plus 4 bytes per block with aux2. */
    return 64 + align64((size_t)m * (size_t)w->k) + align64((size_t)m * nb * sizeof(float)) +
           align64((size_t)m * nb * 2 * sizeof(int16_t)) +
           (kt->panel == MM_PANEL_HALVES ? align64((size_t)m * nb * 4) : 0);
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

typedef void (*quantize_row_fn)(const float *x, int64_t k, int8_t *q, float *d, int16_t *s);
static const quantize_row_fn k_quantize_row[MM_N_ISA] = {
    [CPU_ISA_SCALAR] = mm_quantize_row_scalar,
    [CPU_ISA_AVX2] = mm_quantize_row_avx2,
    [CPU_ISA_AVX512] = mm_quantize_row_avx512,
};

typedef struct {
    const mm_args *a;
    cpu_isa isa;
} mm_task;

static void quantize_rows(const mm_args *a, cpu_isa isa, int64_t i0, int64_t i1) {
    const int64_t k = a->w->k, nb = a->xq.nb;
    if (a->xp) { /* panels; i0 is a multiple of MM_PR */
        const size_t pb = (size_t)mm_panel_bytes(a->kt);
        for (int64_t p0 = i0; p0 < i1; p0 += MM_PR) {
            const int R = (int)(a->m - p0 < MM_PR ? a->m - p0 : MM_PR);
            mm_quantize_panel_avx512(a->kt, a->x + p0 * a->ldx, a->ldx, R, k,
                                     a->xp + (size_t)p0 * (size_t)nb * pb);
        }
        return;
    }
    const quantize_row_fn quantize_row = k_quantize_row[isa];
    for (int64_t i = i0; i < i1; i++)
        quantize_row(a->x + i * a->ldx, k, a->xq.q + i * k, a->xq.d + i * nb, a->xq.s + i * 2 * nb);
}

static void task_quantize(void *ctx, int64_t t) {
    const mm_task *T = ctx;
    int64_t i0 = t * QUANT_ROWS_PER_TASK, i1 = i0 + QUANT_ROWS_PER_TASK;
    quantize_rows(T->a, T->isa, i0, i1 < T->a->m ? i1 : T->a->m);
}

/* 16-column groups per task, from n alone. Quantised: about 16 tasks (enough to balance
 * a few threads, few enough that handing them out stays cheap), at most 16 groups. Float:
 * FCOLS_PER_TASK columns. */
static int64_t groups_per_task(const mm_args *a) {
    if (!a->kt->quantised) return FCOLS_PER_TASK / MM_NC;
    int64_t g = (a->w->n + MM_NC - 1) / MM_NC / 16;
    return g < 1 ? 1 : g > 16 ? 16 : g;
}

/* Column tasks of one weight: fixed chunks of output columns, from n alone. */
static int64_t column_tasks(const mm_args *a) {
    const int64_t ngroups = (a->w->n + MM_NC - 1) / MM_NC, gpt = groups_per_task(a);
    return (ngroups + gpt - 1) / gpt;
}

static void run_column_task(const mm_args *a, int64_t t) {
    const int64_t ngroups = (a->w->n + MM_NC - 1) / MM_NC, gpt = groups_per_task(a);
    const int64_t g0 = t * gpt, g1 = g0 + gpt < ngroups ? g0 + gpt : ngroups;
    a->run(a, g0, g1);
}

/* Brings a's activations into the form the quantised kernels read, in scratch: int8 rows
 * or panels (float kernels read x as it is). Row-local, so splitting rows over threads
 * cannot change any bit. */
static void prepare_activations(threadpool *tp, mm_args *a, cpu_isa isa, void *scratch) {
    const cpu_weight *w = a->w;
    const int64_t m = a->m, row_tasks = (m + QUANT_ROWS_PER_TASK - 1) / QUANT_ROWS_PER_TASK;
    if (a->kt->quantised) {
        a->xq = carve_xq(w, m, scratch);
        if (isa == CPU_ISA_AVX512 && a->kt->panel != MM_PANEL_NONE && m >= a->kt->panel_min_m)
            a->xp = (uint8_t *)a->xq.q;
        mm_task T = {a, isa};
        if (m * w->k >= 32768) threadpool_run(tp, task_quantize, &T, row_tasks);
        else quantize_rows(a, isa, 0, m);
    }
}

/* The ISA this weight runs on: the active one, or the highest below it that the type has
 * a kernel for (all give the same bits). */
static cpu_isa kernel_isa(const mm_kernel *kt, cpu_isa isa) {
    while (isa > CPU_ISA_SCALAR && !kt->run[isa]) isa = (cpu_isa)(isa - 1);
    return isa;
}

static void init_args(mm_args *a, const cpu_weight *w, cpu_isa isa, const float *x, int64_t m,
                      int64_t ldx, float *y, int64_t ldy) {
    memset(a, 0, sizeof *a);
    a->w = w;
    a->kt = mm_kernel_of(w->type);
    a->run = a->kt->run[isa];
    a->m = m;
    a->x = x;
    a->ldx = ldx;
    a->y = y;
    a->ldy = ldy;
}

/* Several matmuls in one pool run (cpu_matmul_multi: weights over the same activations;
 * cpu_matmul_grouped: independent ones): the tasks are the column tasks of each in turn. */
typedef struct {
    const mm_args *a;
    const int64_t *first; /* first[i]: index of matmul i's first task; first[n]: total */
    int n;
} grouped_task;

static void task_grouped(void *ctx, int64_t t) {
    const grouped_task *G = ctx;
    int lo = 0, hi = G->n - 1; /* the matmul whose task range holds t */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (G->first[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    run_column_task(&G->a[lo], t - G->first[lo]);
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
    /* Same type: one kernel row, one ISA for all. */
    const cpu_isa isa = kernel_isa(mm_kernel_of(w[0]->type), cpu_isa_active());
    mm_args a[CPU_MATMUL_MAX_MULTI];
    int64_t first[CPU_MATMUL_MAX_MULTI + 1];
    init_args(&a[0], w[0], isa, x, m, ldx, y[0], ldy[0]);
    prepare_activations(tp, &a[0], isa, scratch);
    first[0] = 0;
    for (int i = 0; i < nw; i++) {
        if (i > 0) {
            a[i] = a[0];
            a[i].w = w[i];
            a[i].y = y[i];
            a[i].ldy = ldy[i];
        }
        first[i + 1] = first[i] + column_tasks(&a[i]);
    }
    grouped_task G = {a, first, nw};
    threadpool_run(tp, task_grouped, &G, first[nw]);
}

size_t cpu_matmul_grouped_scratch_bytes(const cpu_weight *w, int64_t total_m, int64_t n) {
    /* Each group's carve adds at most 64 bytes and five round-ups to 64 over its share. */
    return cpu_matmul_scratch_bytes(w, total_m) + (size_t)n * 384;
}

void cpu_matmul_grouped(threadpool *tp, int n, const cpu_matmul_group *g, void *scratch) {
    if (n > CPU_MATMUL_MAX_GROUPS) { /* callers stay below; still correct, in two runs */
        cpu_matmul_grouped(tp, CPU_MATMUL_MAX_GROUPS, g, scratch);
        cpu_matmul_grouped(tp, n - CPU_MATMUL_MAX_GROUPS, g + CPU_MATMUL_MAX_GROUPS, scratch);
        return;
    }
    mm_args a[CPU_MATMUL_MAX_GROUPS];
    int64_t first[CPU_MATMUL_MAX_GROUPS + 1];
    int na = 0;
    char *sp = scratch;
    const mm_args *prev = NULL;
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        if (g[i].m <= 0) continue;
        const cpu_isa isa = kernel_isa(mm_kernel_of(g[i].w->type), cpu_isa_active());
        mm_args *A = &a[na];
        if (prev && prev->x == g[i].x && prev->m == g[i].m && prev->ldx == g[i].ldx &&
            prev->w->type == g[i].w->type && prev->w->k == g[i].w->k) {
            *A = *prev; /* the same activations, already in the kernels' form */
            A->w = g[i].w;
            A->y = g[i].y;
            A->ldy = g[i].ldy;
        } else {
            init_args(A, g[i].w, isa, g[i].x, g[i].m, g[i].ldx, g[i].y, g[i].ldy);
            prepare_activations(tp, A, isa, sp);
            sp += cpu_matmul_scratch_bytes(g[i].w, g[i].m);
        }
        prev = A;
        first[na + 1] = first[na] + column_tasks(A);
        na++;
    }
    if (!na) return;
    grouped_task G = {a, first, na};
    threadpool_run(tp, task_grouped, &G, first[na]);
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
    const mm_kernel *kt = a->kt;
    const uint8_t *wrow = (const uint8_t *)w->data + j * w->row_bytes;
    const int64_t nu = w->k / kt->q->block_elems, nb = a->xq.nb;
    const size_t ub = kt->q->block_bytes;
    for (int64_t i = 0; i < a->m; i++) {
        float total = 0.0f;
        for (int s = 0; s < T->splits; s++) {
            const int64_t u0 = nu * s / T->splits, u1 = nu * (s + 1) / T->splits;
            float part = 0.0f;
            for (int64_t u = u0; u < u1; u++) {
                if (kt->quantised) {
                    part = kt->unit(wrow, u, a->xq.q + i * w->k, a->xq.d + i * nb, a->xq.s + i * 2 * nb, part);
                } else { /* float: a unit is one element */
                    float wv;
                    kt->q->dequant(wrow + (size_t)u * ub, &wv, 1);
                    part = part + a->x[i * a->ldx + u] * wv;
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
    init_args(&a, w, CPU_ISA_SCALAR, x, m, ldx, y, ldy);
    if (a.kt->quantised) {
        a.xq = carve_xq(w, m, scratch);
        quantize_rows(&a, CPU_ISA_SCALAR, 0, m);
    }
    splitk_task T = {&a, 1 + (int)(m % 7)};
    threadpool_run(tp, task_splitk, &T, w->n);
}
