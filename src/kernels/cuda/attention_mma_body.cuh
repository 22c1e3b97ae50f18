/* The mma.sync attention item (the previous kernel, kept selectable for comparison and as a
 * fallback: INVAR_CUDA_ATTN=mma) for one head_dim, included by attention.cu once per
 * supported value with HD (the head_dim) and AT(name) (a per-head_dim name) defined.
 *
 * A CTA holds up to ATT_MAX_ROWS query rows (the query heads of one KV head for consecutive
 * tokens); warp w owns rows 16w .. 16w+15 and walks the keys in blocks of KB positions
 * starting at absolute multiples of KB. Per block: S = Q K^T on mma.sync m16n8k16 (bf16 in,
 * fp32 accumulate, the head dims in one fixed order), masked and scaled to log2 units, an
 * online-softmax step, then O += P V (P rounded to bf16). Every quantity of a row depends
 * only on that row and the keys: the per-row sums run over a thread's own columns in column
 * order and then a fixed xor tree over the four threads of the row, whichever of the 16 rows
 * the row occupies. A block past a row's position is masked for it and leaves its state
 * exactly unchanged (alpha = 1, p = 0), so it does not matter which other rows share the
 * warp. Each KV split (SPLIT positions) starts a fresh state; the split's (m, l, o) is
 * either written out (split items) or folded into the running one in split order by the
 * same fold as the merge kernel. */
#define QCH (HD / 8) /* 16-byte chunks per row of HD bf16 */

/* Byte offset of chunk ch of row r in a [rows][HD] bf16 tile whose chunks are swizzled so
 * that the 8 rows one ldmatrix reads fall in distinct banks. */
static __device__ __forceinline__ uint32_t AT(sw)(int r, int ch)
{
    return (uint32_t)(r * (HD * 2) + ((ch ^ (r & 7)) << 4));
}

/* Keys and values of positions kbase .. kbase+KB-1 into the tiles at ks / vs; positions at
 * or past kend (not cached, or past every row's position) are zero, so a masked weight of
 * exactly 0 meets a finite value. */
template <int NT>
static __device__ __forceinline__ void AT(load_kv)(uint32_t ks, uint32_t vs, const uint16_t *kc,
                                                   const uint16_t *vc, const int32_t *bt, int kbase,
                                                   int kend, int kh, int n_kv, int tid)
{
    /* The block's pages first, all four loads in flight at once: a page lookup inside the
     * copy loop would wait out a global-load latency per copy (the copies are ordered). */
    int pg[KB / PAGE];
#pragma unroll
    for (int p = 0; p < KB / PAGE; p++) pg[p] = kbase + p * PAGE < kend ? __ldg(bt + kbase / PAGE + p) : 0;
#pragma unroll
    for (int i = tid; i < KB * QCH; i += NT) {
        int j = i / QCH, ch = i % QCH, pos = kbase + j;
        uint32_t off = AT(sw)(j, ch);
        if (pos < kend) {
            const int pj = j / PAGE;
            int page = pg[0];
#pragma unroll
            for (int p = 1; p < KB / PAGE; p++) page = pj == p ? pg[p] : page;
            size_t e = (((size_t)page * n_kv + kh) * PAGE + pos % PAGE) * HD + 8 * ch;
            cp_async16(ks + off, kc + e);
            cp_async16(vs + off, vc + e);
        } else {
            st_shared_zero16(ks + off);
            st_shared_zero16(vs + off);
        }
    }
}

/* W warps: W * 16 query rows; every W runs the same per-warp code on its rows (the same
 * blocks, the same instruction sequence), so the variant changes no bit of a row. */
template <int W>
static __device__ __noinline__ void AT(attn_item_run)(const invar_cuda_attn_item it, const uint16_t *__restrict__ q,
            const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
            const int32_t *__restrict__ block_table, const int32_t *__restrict__ ctx_len,
            const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
            float *__restrict__ ws, int n_heads, int n_kv, int max_pages, float scale)
{
    constexpr int NT = 32 * W, MR = 16 * W, ST = ATT_STAGES(W);
    extern __shared__ __align__(128) uint8_t smem[];
    const uint32_t q_s = smem_u32(smem);                        /* [MR][HD] */
    const uint32_t k_s = q_s + MR * HD * 2;                     /* [ST][KB][HD] */
    const uint32_t v_s = k_s + ST * KB * HD * 2;                /* [ST][KB][HD] */
    /* The running output of the thread's rows (folded splits): thread-private, in shared
     * memory to leave the registers to the block's tiles; element i of thread t at
     * [i][t], so a warp's accesses are one row of banks. */
    float *orun = (float *)(smem + (MR + 2 * ST * KB) * HD * 2) + threadIdx.x;
#define ORUN(n, e) orun[((n) * 4 + (e)) * NT]
    const int kh = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int G = n_heads / n_kv, R = it.ntok * G;
    const int32_t *bt = block_table + (size_t)it.seq * max_pages;
    const int last_pos = it.pos0 + it.ntok - 1;
    const int kend = min(ctx_len[it.seq], last_pos + 1);
    const float sl2 = __fmul_rn(scale, 1.44269504088896341f); /* scores in log2 units */

    /* Query rows (zero past R). */
    for (int i = tid; i < MR * QCH; i += NT) {
        int r = i / QCH, ch = i % QCH;
        uint32_t off = AT(sw)(r, ch);
        if (r < R) {
            int tok = it.tok0 + r / G, h = kh * G + r % G;
            cp_async16(q_s + off, q + ((size_t)tok * n_heads + h) * HD + 8 * ch);
        } else {
            st_shared_zero16(q_s + off);
        }
    }
    const int c0 = it.chunk < 0 ? 0 : it.chunk;
    const int c1 = it.chunk < 0 ? last_pos / SPLIT + 1 : it.chunk + it.nchunk;
    const int kb0 = c0 * (SPLIT / KB), kb1 = min(c1 * (SPLIT / KB), (kend - 1) / KB + 1);
    AT(load_kv)<NT>(k_s, v_s, kc, vc, bt, kb0 * KB, kend, kh, n_kv, tid);
    cp_async_commit();

    /* This thread's two rows: g and g + 8 of the warp's 16 (position -1: a padding row). */
    const int g = lane >> 2, tig = lane & 3, wr0 = warp * 16;
    int tpos[2], row[2];
    for (int h = 0; h < 2; h++) {
        row[h] = wr0 + g + 8 * h;
        tpos[h] = row[h] < R ? it.pos0 + row[h] / G : -1;
    }
    const bool wactive = wr0 < R;
    const int wlast = wactive ? it.pos0 + (min(R, wr0 + 16) - 1) / G : -1; /* the warp's last position */
    const int wfirst = it.pos0 + wr0 / G; /* and its first: padding rows (-1) are all -inf anyway */

    float o[HD / 8][4], mc[2], lc[2], mrun[2] = {0, 0}, lrun[2] = {0, 0};
#pragma unroll
    for (int n = 0; n < HD / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[n][e] = 0.0f;
    mc[0] = mc[1] = -INFINITY;
    lc[0] = lc[1] = 0.0f;

    for (int kb = kb0; kb < kb1; kb++) {
        const uint32_t kbuf = k_s + (ST == 2 ? (kb - kb0) & 1 : 0) * (KB * HD * 2);
        const uint32_t vbuf = v_s + (ST == 2 ? (kb - kb0) & 1 : 0) * (KB * HD * 2);
        if (ST == 1) { /* one buffer: this block's copy starts now (several CTAs per SM overlap) */
            if (kb > kb0) {
                AT(load_kv)<NT>(k_s, v_s, kc, vc, bt, kb * KB, kend, kh, n_kv, tid);
                cp_async_commit();
            }
            cp_async_wait0();
        } else if (kb + 1 < kb1) { /* two: the next block's copy overlaps this block */
            const uint32_t nb = ((kb + 1 - kb0) & 1) * (KB * HD * 2);
            AT(load_kv)<NT>(k_s + nb, v_s + nb, kc, vc, bt, (kb + 1) * KB, kend, kh, n_kv, tid);
            cp_async_commit();
            cp_async_wait1();
        } else {
            cp_async_wait0();
        }
        __syncthreads();
        const int kbase = kb * KB;
        if (wactive && kbase <= wlast) {
            /* S = Q K^T: 16 rows x KB keys, head dims in 16-wide steps in order. */
            float s[KB / 8][4];
#pragma unroll
            for (int n = 0; n < KB / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                uint32_t a[4];
                ldsm_x4(a, q_s + AT(sw)(wr0 + (lane & 15), 2 * ks + (lane >> 4)));
#pragma unroll
                for (int np = 0; np < KB / 16; np++) {
                    uint32_t b[4];
                    ldsm_x4(b, kbuf + AT(sw)(16 * np + (lane & 7) + ((lane >> 4) << 3), 2 * ks + ((lane >> 3) & 1)));
                    mma_bf16_16816(s[2 * np], a, b[0], b[1]);
                    mma_bf16_16816(s[2 * np + 1], a, b[2], b[3]);
                }
            }
            /* Mask, scale, online softmax for rows g (h = 0) and g + 8 (h = 1). Keys past a
             * row's position exist only in the warp's diagonal blocks. */
            const bool diag = kbase + KB - 1 > wfirst;
            float alpha[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float v[KB / 4]; /* the thread's KB / 4 scores of the row, in column order */
#pragma unroll
                for (int n = 0; n < KB / 8; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        int key = kbase + 8 * n + 2 * tig + e;
                        v[2 * n + e] = !diag || key <= tpos[h] ? s[n][2 * h + e] : -INFINITY;
                    }
                /* max is exact in any order; a tree keeps the dependency chain short */
                float mx = tree_reduce<KB / 4, op_max>(v);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                /* Rounding is monotonic, so max(s) * sl2 is the max of the scaled scores. */
                const float mnew = next_max(mc[h], __fmul_rn(mx, sl2));
                const float muse = mnew == -INFINITY ? 0.0f : mnew;
                alpha[h] = ex2(__fsub_rn(mc[h], muse));
                mc[h] = mnew;
#pragma unroll
                for (int i = 0; i < KB / 4; i++) v[i] = ex2(__fmaf_rn(v[i], sl2, -muse));
#pragma unroll
                for (int n = 0; n < KB / 8; n++) {
                    s[n][2 * h] = v[2 * n];
                    s[n][2 * h + 1] = v[2 * n + 1];
                }
                /* the row sum: one fixed pairwise tree over the thread's columns, then the
                 * xor tree over the row's four threads */
                float rs = tree_reduce<KB / 4, op_add>(v);
                rs = __fadd_rn(rs, __shfl_xor_sync(0xffffffffu, rs, 1));
                rs = __fadd_rn(rs, __shfl_xor_sync(0xffffffffu, rs, 2));
                lc[h] = __fadd_rn(__fmul_rn(lc[h], alpha[h]), rs);
            }
            /* o * 1 is o: the rescale is skipped when no row of the warp needs it. */
            if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
                for (int n = 0; n < HD / 8; n++) {
                    o[n][0] = __fmul_rn(o[n][0], alpha[0]);
                    o[n][1] = __fmul_rn(o[n][1], alpha[0]);
                    o[n][2] = __fmul_rn(o[n][2], alpha[1]);
                    o[n][3] = __fmul_rn(o[n][3], alpha[1]);
                }
            }
            /* O += P V: keys in 16-wide steps in order. */
#pragma unroll
            for (int j = 0; j < KB / 16; j++) {
                uint32_t pa[4] = {pack_bf16x2(s[2 * j][0], s[2 * j][1]), pack_bf16x2(s[2 * j][2], s[2 * j][3]),
                                  pack_bf16x2(s[2 * j + 1][0], s[2 * j + 1][1]),
                                  pack_bf16x2(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
                for (int dp = 0; dp < HD / 16; dp++) {
                    uint32_t b[4];
                    ldsm_x4_trans(b, vbuf + AT(sw)(16 * j + (lane & 7) + (((lane >> 3) & 1) << 3), 2 * dp + (lane >> 4)));
                    mma_bf16_16816(o[2 * dp], pa, b[0], b[1]);
                    mma_bf16_16816(o[2 * dp + 1], pa, b[2], b[3]);
                }
            }
        }
        if ((kb + 1) % (SPLIT / KB) == 0 || kb + 1 == kb1) {
            /* The split ends: its (m, l, o) out, or folded into the running state. */
            const int c = kb / (SPLIT / KB), sbase = c * SPLIT;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const bool has = wactive && tpos[h] >= sbase; /* the row has keys in the split */
                if (it.chunk >= 0) {
                    if (!has) continue;
                    int tok = it.tok0 + row[h] / G, head = kh * G + row[h] % G;
                    float *dst = ws + ((size_t)(tok_pbase[tok] + c) * n_heads + head) * (HD + 4);
                    if (tig == 0) {
                        dst[0] = mc[h];
                        dst[1] = lc[h];
                    }
#pragma unroll
                    for (int n = 0; n < HD / 8; n++)
                        *(float2 *)(dst + 4 + 8 * n + 2 * tig) = make_float2(o[n][2 * h], o[n][2 * h + 1]);
                } else if (c == 0) {
                    mrun[h] = mc[h];
                    lrun[h] = lc[h];
#pragma unroll
                    for (int n = 0; n < HD / 8; n++) {
                        ORUN(n, 2 * h) = o[n][2 * h];
                        ORUN(n, 2 * h + 1) = o[n][2 * h + 1];
                    }
                } else if (has) {
                    float mn, a, b;
                    fold_scales(mrun[h], mc[h], &mn, &a, &b);
                    mrun[h] = mn;
                    lrun[h] = fold_val(lrun[h], lc[h], a, b);
#pragma unroll
                    for (int n = 0; n < HD / 8; n++) {
                        ORUN(n, 2 * h) = fold_val(ORUN(n, 2 * h), o[n][2 * h], a, b);
                        ORUN(n, 2 * h + 1) = fold_val(ORUN(n, 2 * h + 1), o[n][2 * h + 1], a, b);
                    }
                }
                mc[h] = -INFINITY;
                lc[h] = 0.0f;
#pragma unroll
                for (int n = 0; n < HD / 8; n++) o[n][2 * h] = o[n][2 * h + 1] = 0.0f;
            }
        }
        __syncthreads(); /* the next iteration loads into the buffer just read */
    }
    if (it.chunk >= 0) return;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (tpos[h] < 0) continue;
        int tok = it.tok0 + row[h] / G, head = kh * G + row[h] % G;
        __nv_bfloat162 *dst = (__nv_bfloat162 *)(out + ((size_t)tok * n_heads + head) * HD + 2 * tig);
#pragma unroll
        for (int n = 0; n < HD / 8; n++)
            dst[4 * n] = __floats2bfloat162_rn(__fdiv_rn(ORUN(n, 2 * h), lrun[h]),
                                               __fdiv_rn(ORUN(n, 2 * h + 1), lrun[h]));
    }
#undef ORUN
}

/* counts == NULL: CTA x runs item grid-1-x (the items of a sequence come in position order,
 * so the longest start first and the causal tail is short). Otherwise counts = {n_items,
 * max_pages} in device memory and the CTAs stride over the items: the grid stays fixed while
 * the work changes (a replayed CUDA graph). Either way an item is the same instruction
 * sequence. */
template <int W>
__global__ void __launch_bounds__(32 * W, W == 1 ? 4 : 1)
AT(attn_kernel)(const invar_cuda_attn_item *__restrict__ items, const uint16_t *__restrict__ q,
            const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
            const int32_t *__restrict__ block_table, const int32_t *__restrict__ ctx_len,
            const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
            float *__restrict__ ws, int n_heads, int n_kv, int max_pages, float scale,
            const int32_t *__restrict__ counts)
{
    if (!counts) {
        AT(attn_item_run)<W>(items[gridDim.x - 1 - blockIdx.x], q, kc, vc, block_table, ctx_len, tok_pbase, out,
                          ws, n_heads, n_kv, max_pages, scale);
        return;
    }
    for (int i = blockIdx.x; i < __ldg(counts); i += gridDim.x) {
        AT(attn_item_run)<W>(items[i], q, kc, vc, block_table, ctx_len, tok_pbase, out, ws, n_heads, n_kv,
                          __ldg(counts + 1), scale);
        __syncthreads(); /* the next item reuses the shared memory */
    }
}

#undef QCH
