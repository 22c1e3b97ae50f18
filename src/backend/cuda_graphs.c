/* Decode steps as CUDA graphs.
 *
 * When a KV cache is created, the layer stack of a decode step (one token per sequence) is
 * captured once per batch bucket (1, 2, 4, 8, then steps of 8 to 64 and of 16 to 256, up to
 * the backend's row limit). A step of B sequences replays the smallest bucket Bp >= B: rows
 * B..Bp-1 are padding (token 0 at position 0, written to a scratch page no sequence owns).
 * Every kernel computes a row with the same operations whatever rows sit beside it, so the
 * padding changes no bit of a real row (test_cuda_engine: graph vs eager at every bucket
 * boundary).
 *
 * What a graph cannot bake in lives in device memory it reads: the step's arrays sit at fixed
 * addresses of the cache's own staging buffer (one copy per step fills them), and attention
 * takes its item count and block-table stride from there, striding its fixed grid over the
 * items. Graphs run on a context of their own, so an eager step that grows the GEMM
 * workspace never moves memory a graph points at. Contexts longer than GRAPH_MAX_CTX run
 * eagerly (launch overhead no longer matters there). */
#ifdef INVAR_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/attention.h" /* KV_BLOCK */
#include "backend/cuda_backend.h"

#define GRAPH_MAX_BUCKETS 32
#define GRAPH_MAX_ROWS 256
#define GRAPH_MAX_CTX 16384

struct cuda_graphs {
    invar_cuda_ctx *ctx;                     /* the graphs' own workspaces */
    int n;
    int rows[GRAPH_MAX_BUCKETS];             /* bucket sizes, ascending */
    int split[GRAPH_MAX_BUCKETS];            /* attention splits the KV over CTAs */
    cudaGraphExec_t exec[GRAPH_MAX_BUCKETS];
    step_staging stage;                      /* inputs at fixed addresses */
    step_layout lay;
    float *ws;                               /* split-KV partials */
    int max_ctx, max_pages, max_split_rows;
};

static int bucket_sizes(int max_rows, int *out) {
    int n = 0;
    for (int b = 1; b <= GRAPH_MAX_ROWS && n < GRAPH_MAX_BUCKETS; b = b < 8 ? 2 * b : b < 64 ? b + 8 : b + 16) {
        if (b >= max_rows) break;
        out[n++] = b;
    }
    if (n < GRAPH_MAX_BUCKETS) out[n++] = max_rows < GRAPH_MAX_ROWS ? max_rows : GRAPH_MAX_ROWS;
    return n;
}

static int max_rows_of(const cuda_backend *c) {
    int64_t r = c->base.opts.max_logits < c->base.opts.max_tokens ? c->base.opts.max_logits : c->base.opts.max_tokens;
    return r < GRAPH_MAX_ROWS ? (int)r : GRAPH_MAX_ROWS;
}

/* Split the KV over CTAs where one CTA per (row, KV head) would leave most of the chip idle
 * (the rule the eager plan uses for one-token tiles). */
static int bucket_splits(const cuda_backend *c, int rows) {
    return (long)rows * c->base.m->cfg.n_head_kv < 4L * invar_cuda_sm_count(c->ctx);
}

static int max_ctx_of(const cuda_backend *c) {
    return c->base.m->rope_len < GRAPH_MAX_CTX ? (int)c->base.m->rope_len : GRAPH_MAX_CTX;
}

static step_caps caps_of(int rows, int max_pages, int split_rows, int max_ctx) {
    size_t split_items = (size_t)split_rows * (size_t)((max_ctx - 1) / INVAR_CUDA_KV_SPLIT + 1);
    return (step_caps){(size_t)rows, (size_t)rows, (size_t)rows, split_items > (size_t)rows ? split_items : (size_t)rows,
                       (size_t)rows * (size_t)max_pages};
}

static size_t partials_of(int split_rows, int max_ctx) {
    return (size_t)split_rows * (size_t)((max_ctx - 1) / INVAR_CUDA_KV_SPLIT + 1);
}

static int largest_split_rows(const cuda_backend *c, const int *rows, int n) {
    int r = 0;
    for (int i = 0; i < n; i++)
        if (bucket_splits(c, rows[i])) r = rows[i];
    return r;
}

size_t cuda_graphs_bytes(const cuda_backend *c) {
    int rows[GRAPH_MAX_BUCKETS], n = bucket_sizes(max_rows_of(c), rows);
    const model_config *cf = &c->base.m->cfg;
    int max_ctx = max_ctx_of(c), sr = largest_split_rows(c, rows, n);
    step_caps k = caps_of(rows[n - 1], (max_ctx + KV_BLOCK - 1) / KV_BLOCK, sr, max_ctx);
    return step_layout_of(&k).end + invar_cuda_attn_ws_bytes(partials_of(sr, max_ctx), (int)cf->n_head,
                                                             (int)cf->head_dim) +
           ((size_t)64 << 20); /* the graphs' GEMM workspace and the graphs themselves */
}

void cuda_graphs_free(cuda_graphs *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) cudaGraphExecDestroy(g->exec[i]);
    step_staging_free(&g->stage);
    cudaFree(g->ws);
    invar_cuda_free(g->ctx);
    free(g);
}

/* Writes a step of `rows` rows into the graph staging buffer: the real rows from the batch
 * (NULL: none) and padding after them; returns the attention item count. */
static int fill_step(cuda_backend *c, cuda_graphs *g, backend_kv *kv, const fwd_batch *b, int rows, int split,
                     int max_pages) {
    const model_config *cf = &c->base.m->cfg;
    host_bufs *h = &c->h;
    step_arrays hs = step_arrays_at(g->stage.host, &g->lay);
    const int real = b ? (int)b->n_tokens : 0;
    const int32_t scratch = (int32_t)kv->n_blocks;
    for (int j = 0; j < rows; j++) {
        int32_t *bt = hs.btab + (size_t)j * max_pages;
        if (j < real) {
            hs.tokens[j] = b->tokens[j];
            hs.pos[j] = b->pos[j];
            hs.slot[j] = h->slot[j];
            int pages = (b->pos[j] + KV_BLOCK) / KV_BLOCK;
            for (int p = 0; p < max_pages; p++) bt[p] = p < pages ? b->block_tables[j][p] : 0;
        } else {
            hs.tokens[j] = 0;
            hs.pos[j] = 0;
            hs.slot[j] = scratch * KV_BLOCK;
            h->ctx_len[j] = 1;
            bt[0] = scratch;
            for (int p = 1; p < max_pages; p++) bt[p] = 0;
        }
        hs.logit_rows[j] = j;
        hs.tok_seq[j] = j; /* one token per sequence: row j of the block tables (MLA reads it) */
        h->q_start[j] = j;
        h->q_len[j] = 1;
        hs.ctx_len[j] = h->ctx_len[j];
    }
    hs.counts[1] = max_pages;
    if (c->mla_R) { /* MLA's attention takes no item list, only the block-table stride */
        hs.counts[0] = 0;
        return 0;
    }
    invar_cuda_attn_shape sh;
    if (invar_cuda_attn_measure(rows, h->q_start, h->q_len, h->ctx_len, (int)cf->n_head, (int)cf->n_head_kv,
                                (int)cf->head_dim, max_pages, invar_cuda_sm_count(c->ctx), &sh))
        return -1;
    invar_cuda_attn_fill(rows, h->q_start, h->q_len, h->ctx_len, (int)cf->n_head, (int)cf->n_head_kv,
                         split ? NULL : hs.items, split ? hs.items : NULL, hs.tok_pos, hs.tok_pbase);
    int n_items = split ? sh.n_items_split : sh.n_items_tile;
    hs.counts[0] = n_items;
    hs.counts[1] = max_pages;
    return n_items;
}

/* Uploads what fill_step wrote: the fixed arrays and the used items in one copy, the used
 * part of the block tables in another. */
static int upload_step(cuda_graphs *g, int rows, int n_items, int max_pages) {
    size_t items_end = g->lay.items + (size_t)n_items * sizeof(invar_cuda_attn_item);
    size_t btab_end = g->lay.btab + (size_t)rows * (size_t)max_pages * sizeof(int32_t);
    return step_staging_upload(&g->stage, 0, items_end) || step_staging_upload(&g->stage, g->lay.btab, btab_end) ||
           step_staging_uploaded(&g->stage);
}

static invar_cuda_attn_launch launch_of(const cuda_backend *c, const cuda_graphs *g, const backend_kv *kv, int rows,
                                        int split) {
    const model_config *cf = &c->base.m->cfg;
    step_arrays ds = step_arrays_at(g->stage.dev, &g->lay);
    /* Split items: a fixed grid of CTAs strides over them; decode tiles run on the one-warp
     * attention variant, several CTAs per SM, so the grid holds 4 per SM. */
    int grid = split ? (4 * invar_cuda_sm_count(c->ctx) + (int)cf->n_head_kv - 1) / (int)cf->n_head_kv : rows;
    return (invar_cuda_attn_launch){
        .items = ds.items, .grid = grid, .counts = ds.counts, .max_pages = 0, .split = split,
        .rows_max = (int)(cf->n_head / cf->n_head_kv), .n_tokens = rows, .n_heads = (int)cf->n_head,
        .n_kv_heads = (int)cf->n_head_kv, .head_dim = (int)cf->head_dim, .ctx_len = ds.ctx_len,
        .tok_pos = ds.tok_pos, .tok_pbase = ds.tok_pbase, .block_table = ds.btab, .ws = split ? g->ws : NULL,
        .cache_pages = kv->n_alloc};
}

/* A padding-only step of bucket i, run eagerly: it sizes the context's workspaces. Every
 * bucket is warmed before any is captured, since a workspace that grows moves, and a graph
 * captured before would point at the old one. */
static int warm_one(cuda_backend *c, cuda_graphs *g, backend_kv *kv, int i) {
    const int rows = g->rows[i], split = g->split[i];
    step_arrays ds = step_arrays_at(g->stage.dev, &g->lay);
    invar_cuda_attn_launch at = launch_of(c, g, kv, rows, split);
    int n_items = fill_step(c, g, kv, NULL, rows, split, 1);
    return n_items < 0 || upload_step(g, rows, n_items, 1) || cuda_run(c, g->ctx, kv, &ds, rows, rows, &at) ||
           cudaStreamSynchronize((cudaStream_t)c->stream) != cudaSuccess;
}

static int capture_one(cuda_backend *c, cuda_graphs *g, backend_kv *kv, int i) {
    cudaStream_t st = (cudaStream_t)c->stream;
    const int rows = g->rows[i], split = g->split[i];
    step_arrays ds = step_arrays_at(g->stage.dev, &g->lay);
    invar_cuda_attn_launch at = launch_of(c, g, kv, rows, split);
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
    int rc = cuda_run(c, g->ctx, kv, &ds, rows, rows, &at);
    if (cudaStreamEndCapture(st, &graph) != cudaSuccess || rc) {
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        return -1;
    }
    rc = cudaGraphInstantiate(&g->exec[i], graph, 0) == cudaSuccess ? 0 : -1;
    cudaGraphDestroy(graph);
    return rc;
}

void cuda_graphs_capture(cuda_backend *c, backend_kv *kv) {
    backend *b = &c->base;
    const model_config *cf = &b->m->cfg;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cuda_graphs *g = calloc(1, sizeof *g);
    int nb = 0, rows[GRAPH_MAX_BUCKETS];
    const char *why = "out of memory";
    if (!g) goto fail;
    nb = bucket_sizes(max_rows_of(c), rows);
    g->max_ctx = max_ctx_of(c);
    g->max_pages = (g->max_ctx + KV_BLOCK - 1) / KV_BLOCK;
    g->max_split_rows = largest_split_rows(c, rows, nb);
    step_caps k = caps_of(rows[nb - 1], g->max_pages, g->max_split_rows, g->max_ctx);
    g->lay = step_layout_of(&k);
    size_t ws = invar_cuda_attn_ws_bytes(partials_of(g->max_split_rows, g->max_ctx), (int)cf->n_head,
                                         (int)cf->head_dim);
    why = "cannot create a context";
    if (invar_cuda_init(&g->ctx, b->opts.cuda_device)) goto fail;
    invar_cuda_set_stream(g->ctx, c->stream);
    why = "cannot allocate its buffers";
    if (step_staging_init(&g->stage, c->stream) || step_staging_fit(&g->stage, g->lay.end) ||
        (ws && cudaMalloc((void **)&g->ws, ws) != cudaSuccess))
        goto fail;
    why = "warm-up failed";
    for (int i = 0; i < nb; i++) {
        g->rows[i] = rows[i];
        g->split[i] = bucket_splits(c, rows[i]);
        if (warm_one(c, g, kv, i)) goto fail;
    }
    why = "capture failed";
    for (int i = 0; i < nb; i++) {
        if (capture_one(c, g, kv, i)) goto fail;
        g->n = i + 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    kv->graphs = g;
    snprintf(b->info, sizeof b->info,
             "cuda graphs: %d decode buckets (1..%d sequences, contexts up to %d) captured in %.0f ms", nb,
             rows[nb - 1], g->max_ctx, 1e3 * (double)(t1.tv_sec - t0.tv_sec) + 1e-6 * (double)(t1.tv_nsec - t0.tv_nsec));
    return;
fail:
    snprintf(b->info, sizeof b->info, "cuda graphs: off (%s: %s); decode steps run eagerly", why,
             g && g->ctx ? invar_cuda_last_error(g->ctx) : cudaGetErrorString(cudaGetLastError()));
    cudaGetLastError();
    cudaStreamSynchronize((cudaStream_t)c->stream);
    cuda_graphs_free(g);
}

int cuda_graphs_step(cuda_backend *c, backend_kv *kv, const fwd_batch *b, int n_seqs, int max_pages) {
    cuda_graphs *g = kv->graphs;
    const int64_t T = b->n_tokens;
    if (!g || n_seqs != T || T > g->rows[g->n - 1] || b->n_logits != T || max_pages > g->max_pages) return 0;
    for (int64_t i = 0; i < T; i++)
        if (b->logit_rows[i] != i) return 0;
    int i = 0;
    while (g->rows[i] < T) i++;
    if (step_staging_wait(&g->stage)) return -1;
    int n_items = fill_step(c, g, kv, b, g->rows[i], g->split[i], max_pages);
    if (n_items < 0 || upload_step(g, g->rows[i], n_items, max_pages) ||
        cudaGraphLaunch(g->exec[i], (cudaStream_t)c->stream) != cudaSuccess) {
        snprintf(c->base.error, sizeof c->base.error, "cuda: graph step failed: %s",
                 cudaGetErrorString(cudaGetLastError()));
        return -1;
    }
    return 1;
}
#endif
