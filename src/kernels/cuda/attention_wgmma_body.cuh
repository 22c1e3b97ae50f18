/* The wgmma attention item for one head_dim, included by attention.cu once per supported
 * value with HD (the head_dim) and AT(name) (a per-head_dim name) defined.
 *
 * A CTA holds up to 64 * NWG query rows (the query heads of one KV head for consecutive
 * tokens, padded with zero rows); consumer warpgroup w owns rows 64w .. 64w+63 and walks the
 * keys in blocks of KB = 64 positions starting at absolute multiples of KB. Per block and
 * warpgroup:
 *   S = Q K^T    wgmma m64n64k16, Q and K by descriptor (K-major), the head dims in k16 steps
 *                in order (HD/16 instructions accumulating from a fresh zero);
 *   softmax      masked and scaled to log2 units; the row max and row sum over the thread's
 *                16 columns by a fixed pairwise tree, then the xor tree over the row's four
 *                lanes: the accumulator fragment of m64nN puts row 16w' + l/4 (+8) on lanes
 *                4(l/4) .. 4(l/4)+3 of warp w', columns 8n + 2(l%4) (+1) -- the same layout
 *                as mma.sync m16n8, so this is the per-row arithmetic of the mma.sync kernel;
 *   O += P V     P rounded to bf16 in registers (the accumulator fragment of S is, k16 slice
 *                by k16 slice, the A-register fragment of wgmma), V by descriptor (MN-major,
 *                V is stored [key][head dim]), keys in k16 steps in order.
 * Every quantity of a row depends only on that row and the keys: wgmma rows are independent,
 * and a block past a row's position leaves its state exactly unchanged (alpha = 1, p = 0),
 * so it does not matter which other rows share the warpgroup or whether the warpgroup ran
 * that block at all. Each KV split (SPLIT positions) starts a fresh state; its (m, l, o) is
 * either written out (split items: it.nchunk consecutive splits from it.chunk, one copy ring
 * across them) or folded into the running one in split order by the same fold as the merge
 * kernel. A warp whose rows are all padding skips the softmax (P = 0 into its rows).
 *
 * Shared memory (1024-byte aligned, 128-byte swizzle as TMA would write it): Q [NWG][HD/64]
 * [64 rows][64], then ST stages of K [HD/64][64 keys][64] and V (same), 8 KB sub-tiles, then
 * (RUN) the running outputs; all threads copy with cp.async (a page of one KV head is 16
 * contiguous rows), ST-stage ring, one __syncthreads per block. RUN = false: a variant for
 * split launches only (every item one split, written out), whose freed space holds a deeper
 * ring. NWG, ST and RUN change the speed, not the per-row arithmetic. */
#define WCH (HD / 8) /* 16-byte chunks per row of HD bf16 */
static_assert(HD % 64 == 0, "head dims in 64-wide swizzle sub-tiles");

/* Byte offset of 16-byte chunk ch of row r in a tile laid out [r / 64][ch / 8][r % 64][64 bf16]
 * with 128-byte rows whose chunks are XOR-swizzled by the row's low 3 bits (with a
 * 1024-byte-aligned base this is the SWIZZLE_128B pattern of the wgmma descriptors). */
static __device__ __forceinline__ uint32_t AT(wsw)(int r, int ch)
{
    return (uint32_t)((r >> 6) * (64 * HD * 2) + (ch >> 3) * 8192 + (r & 63) * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

/* Keys and values of positions kbase .. kbase+KB-1 into the tiles at ks / vs; positions at
 * or past kend (not cached, or past every row's position) are zero, so a masked weight of
 * exactly 0 meets a finite value. */
template <int NT>
static __device__ __forceinline__ void AT(wload_kv)(uint32_t ks, uint32_t vs, const uint16_t *kc,
                                                    const uint16_t *vc, const int32_t *bt, int kbase,
                                                    int kend, int kh, int n_kv, int tid)
{
    int pg[KB / PAGE];
#pragma unroll
    for (int p = 0; p < KB / PAGE; p++) pg[p] = kbase + p * PAGE < kend ? __ldg(bt + kbase / PAGE + p) : 0;
#pragma unroll
    for (int i = tid; i < KB * WCH; i += NT) {
        int j = i / WCH, ch = i % WCH, pos = kbase + j;
        uint32_t off = AT(wsw)(j, ch);
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

template <int NWG, int ST, bool RUN>
static __device__ __forceinline__ void AT(wg_item_run)(const invar_cuda_attn_item it, const uint16_t *__restrict__ q,
            const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
            const int32_t *__restrict__ block_table, const int32_t *__restrict__ ctx_len,
            const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
            float *__restrict__ ws, int n_heads, int n_kv, int max_pages, float scale)
{
    constexpr int NT = 128 * NWG, MR = 64 * NWG;
    static_assert(ST >= 2, "a copy stage in flight while one is read");
    constexpr uint32_t KV_TILE = KB * HD * 2;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw), q_s = (raw + 1023u) & ~1023u; /* host adds 1 KB slack */
    const uint32_t k_s = q_s + MR * HD * 2;      /* [ST] K tiles */
    const uint32_t v_s = k_s + ST * KV_TILE;     /* [ST] V tiles */
    /* The running output of the thread's rows (folded splits, RUN only): thread-private,
     * element i of thread t at [i][t] (a warp's accesses are one row of banks). */
    float *orun = (float *)(smem_raw + (q_s - raw) + MR * HD * 2 + 2 * ST * KV_TILE) + threadIdx.x;
#define ORUN(i) orun[(i) * NT]
    const int kh = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wwarp = (tid >> 5) & 3;
    const int G = n_heads / n_kv, R = it.ntok * G;
    const int32_t *bt = block_table + (size_t)it.seq * max_pages;
    const int last_pos = it.pos0 + it.ntok - 1;
    const int kend = min(ctx_len[it.seq], last_pos + 1);
    const float sl2 = __fmul_rn(scale, 1.44269504088896341f); /* scores in log2 units */

    /* Query rows (zero past R), in the first copy group. */
    for (int i = tid; i < MR * WCH; i += NT) {
        int r = i / WCH, ch = i % WCH;
        uint32_t off = AT(wsw)(r, ch);
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
    /* Prologue: blocks kb0 .. kb0+ST-2, one copy group each (empty past kb1). */
#pragma unroll
    for (int i = 0; i < ST - 1; i++) {
        if (kb0 + i < kb1)
            AT(wload_kv)<NT>(k_s + i * KV_TILE, v_s + i * KV_TILE, kc, vc, bt, (kb0 + i) * KB, kend, kh, n_kv, tid);
        cp_async_commit();
    }

    /* This thread's two rows: g and g + 8 of its warp's 16 (position -1: a padding row). */
    const int g = lane >> 2, tig = lane & 3, wr0 = 64 * wg;
    int tpos[2], row[2];
    for (int h = 0; h < 2; h++) {
        row[h] = wr0 + 16 * wwarp + g + 8 * h;
        tpos[h] = row[h] < R ? it.pos0 + row[h] / G : -1;
    }
    const bool wactive = wr0 < R; /* warpgroup-uniform, as every condition around a wgmma */
    const bool wreal = wr0 + 16 * wwarp < R; /* warp-uniform: the warp holds a real row */
    const int wlast = wactive ? it.pos0 + (min(R, wr0 + 64) - 1) / G : -1; /* the warpgroup's last position */
    const int wfirst = it.pos0 + wr0 / G; /* and its first: padding rows (-1) are never written */
    const uint32_t qa = q_s + (uint32_t)wg * (64 * HD * 2);

    float o[HD / 2], mc[2], lc[2], mrun[2] = {0, 0}, lrun[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] = 0.0f;
    mc[0] = mc[1] = -INFINITY;
    lc[0] = lc[1] = 0.0f;

    for (int kb = kb0; kb < kb1; kb++) {
        const int bi = kb - kb0;
        const uint32_t kbuf = k_s + (uint32_t)(bi % ST) * KV_TILE, vbuf = v_s + (uint32_t)(bi % ST) * KV_TILE;
        cp_async_wait<ST - 2>(); /* this thread's copies of block kb (and of Q) are done */
        fence_proxy_async();     /* its generic-proxy writes, before the wgmma (async proxy) reads */
        __syncthreads();         /* everyone's copies are in; everyone is done with block kb-1 */
        {   /* the block ST-1 ahead, into the stage block kb-1 used */
            const int nb = kb + ST - 1;
            const uint32_t sb = (uint32_t)((bi + ST - 1) % ST) * KV_TILE;
            if (nb < kb1) AT(wload_kv)<NT>(k_s + sb, v_s + sb, kc, vc, bt, nb * KB, kend, kh, n_kv, tid);
            cp_async_commit();
        }
        const int kbase = kb * KB;
        if (wactive && kbase <= wlast) {
            /* S = Q K^T: 64 rows x KB keys, head dims in k16 steps in order. */
            float s[KB / 2];
#pragma unroll
            for (int i = 0; i < KB / 2; i++) s[i] = 0.0f;
            fence_regs<KB / 2>(s);
            wgmma_fence();
#pragma unroll
            for (int hh = 0; hh < HD / 64; hh++)
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
                    wgmma_m64n64k16_ss(s, smem_desc_sw128(qa + hh * 8192 + 32 * kk),
                                       smem_desc_sw128(kbuf + hh * 8192 + 32 * kk), hh + kk > 0);
            wgmma_commit();
            wgmma_wait0();
            fence_regs<KB / 2>(s);
            /* A warp without real rows (decode: 4 of 64 rows are real) skips the softmax and
             * gives P = 0: wgmma rows are independent, so no real row sees the difference;
             * its own rows are never written. Warp-uniform (the shuffles below). */
            uint32_t pa[KB / 16][4];
            if (wreal) {
                /* Mask, scale, online softmax for rows g (h = 0) and g + 8 (h = 1). Keys past a
                 * row's position exist only in the warpgroup's diagonal blocks. */
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
                            v[2 * n + e] = !diag || key <= tpos[h] ? s[4 * n + 2 * h + e] : -INFINITY;
                        }
                    float mx = tree_reduce<KB / 4, op_max>(v);
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    /* Rounding is monotonic, so max(s) * sl2 is the max of the scaled scores. */
                    const float mnew = fmaxf(mc[h], __fmul_rn(mx, sl2));
                    const float muse = mnew == -INFINITY ? 0.0f : mnew;
                    alpha[h] = ex2(__fsub_rn(mc[h], muse));
                    mc[h] = mnew;
#pragma unroll
                    for (int i = 0; i < KB / 4; i++) v[i] = ex2(__fmaf_rn(v[i], sl2, -muse));
#pragma unroll
                    for (int n = 0; n < KB / 8; n++) {
                        s[4 * n + 2 * h] = v[2 * n];
                        s[4 * n + 2 * h + 1] = v[2 * n + 1];
                    }
                    float rs = tree_reduce<KB / 4, op_add>(v);
                    rs = __fadd_rn(rs, __shfl_xor_sync(0xffffffffu, rs, 1));
                    rs = __fadd_rn(rs, __shfl_xor_sync(0xffffffffu, rs, 2));
                    lc[h] = __fadd_rn(__fmul_rn(lc[h], alpha[h]), rs);
                }
                /* o * 1 is o: the rescale is skipped when no row of the warp needs it. */
                if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
                    for (int n = 0; n < HD / 8; n++) {
                        o[4 * n] = __fmul_rn(o[4 * n], alpha[0]);
                        o[4 * n + 1] = __fmul_rn(o[4 * n + 1], alpha[0]);
                        o[4 * n + 2] = __fmul_rn(o[4 * n + 2], alpha[1]);
                        o[4 * n + 3] = __fmul_rn(o[4 * n + 3], alpha[1]);
                    }
                }
                /* P as the A operand: k16 slice j is columns 16j .. 16j+15 of S. */
#pragma unroll
                for (int j = 0; j < KB / 16; j++) {
                    pa[j][0] = pack_bf16x2(s[8 * j], s[8 * j + 1]);
                    pa[j][1] = pack_bf16x2(s[8 * j + 2], s[8 * j + 3]);
                    pa[j][2] = pack_bf16x2(s[8 * j + 4], s[8 * j + 5]);
                    pa[j][3] = pack_bf16x2(s[8 * j + 6], s[8 * j + 7]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < KB / 16; j++) pa[j][0] = pa[j][1] = pa[j][2] = pa[j][3] = 0u;
            }
            /* O += P V: keys in k16 steps in order; each 64-dim half of O is one accumulator. */
            fence_regs<HD / 2>(o);
            fence_regs_u<KB / 4>(&pa[0][0]);
            wgmma_fence();
#pragma unroll
            for (int j = 0; j < KB / 16; j++)
#pragma unroll
                for (int hh = 0; hh < HD / 64; hh++)
                    wgmma_m64n64k16_rs_bt(o + 32 * hh, pa[j], smem_desc_sw128_mn(vbuf + hh * 8192 + j * 2048), 1);
            wgmma_commit();
            wgmma_wait0();
            fence_regs<HD / 2>(o);
        }
        if ((kb + 1) % (SPLIT / KB) == 0 || kb + 1 == kb1) {
            /* The split ends: its (m, l, o) out, or folded into the running state. */
            const int c = kb / (SPLIT / KB), sbase = c * SPLIT;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const bool has = wactive && tpos[h] >= sbase; /* the row has keys in the split */
                if (!RUN || it.chunk >= 0) { /* !RUN: split launches only (a whole item there would
                                              * write every split's partial: still right) */
                    if (!has) continue;
                    int tok = it.tok0 + row[h] / G, head = kh * G + row[h] % G;
                    float *dst = ws + ((size_t)(tok_pbase[tok] + c) * n_heads + head) * (HD + 4);
                    if (tig == 0) {
                        dst[0] = mc[h];
                        dst[1] = lc[h];
                    }
#pragma unroll
                    for (int n = 0; n < HD / 8; n++)
                        *(float2 *)(dst + 4 + 8 * n + 2 * tig) = make_float2(o[4 * n + 2 * h], o[4 * n + 2 * h + 1]);
                } else if (!RUN) {
                } else if (c == 0) {
                    mrun[h] = mc[h];
                    lrun[h] = lc[h];
#pragma unroll
                    for (int n = 0; n < HD / 8; n++) {
                        ORUN(4 * n + 2 * h) = o[4 * n + 2 * h];
                        ORUN(4 * n + 2 * h + 1) = o[4 * n + 2 * h + 1];
                    }
                } else if (has) {
                    float mn, a, b;
                    fold_scales(mrun[h], mc[h], &mn, &a, &b);
                    mrun[h] = mn;
                    lrun[h] = fold_val(lrun[h], lc[h], a, b);
#pragma unroll
                    for (int n = 0; n < HD / 8; n++) {
                        ORUN(4 * n + 2 * h) = fold_val(ORUN(4 * n + 2 * h), o[4 * n + 2 * h], a, b);
                        ORUN(4 * n + 2 * h + 1) = fold_val(ORUN(4 * n + 2 * h + 1), o[4 * n + 2 * h + 1], a, b);
                    }
                }
            }
            /* A fresh state for the next split (after both rows: the continue above skips). */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                mc[h] = -INFINITY;
                lc[h] = 0.0f;
            }
#pragma unroll
            for (int i = 0; i < HD / 2; i++) o[i] = 0.0f;
        }
    }
    cp_async_wait<0>(); /* only empty groups are left; none may outlive the item */
    if constexpr (RUN) { /* whole items: the folded output, normalised */
        if (it.chunk >= 0) return;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (tpos[h] < 0) continue;
            int tok = it.tok0 + row[h] / G, head = kh * G + row[h] % G;
            __nv_bfloat162 *dst = (__nv_bfloat162 *)(out + ((size_t)tok * n_heads + head) * HD + 2 * tig);
#pragma unroll
            for (int n = 0; n < HD / 8; n++)
                dst[4 * n] = __floats2bfloat162_rn(__fdiv_rn(ORUN(4 * n + 2 * h), lrun[h]),
                                                   __fdiv_rn(ORUN(4 * n + 2 * h + 1), lrun[h]));
        }
    }
#undef ORUN
}

/* counts == NULL: CTA x runs item grid-1-x (the items of a sequence come in position order,
 * so the longest start first and the causal tail is short). Otherwise counts = {n_items,
 * max_pages} in device memory and the CTAs stride over the items (a replayed CUDA graph).
 * Either way an item is the same instruction sequence, and NWG = 1 or 2 runs the same
 * per-warpgroup code. */
template <int NWG, int ST, bool RUN>
__global__ void __launch_bounds__(128 * NWG, NWG == 1 && ST <= 3 ? 2 : 1)
AT(wg_attn_kernel)(const invar_cuda_attn_item *__restrict__ items, const uint16_t *__restrict__ q,
            const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
            const int32_t *__restrict__ block_table, const int32_t *__restrict__ ctx_len,
            const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
            float *__restrict__ ws, int n_heads, int n_kv, int max_pages, float scale,
            const int32_t *__restrict__ counts)
{
    if (!counts) {
        AT(wg_item_run)<NWG, ST, RUN>(items[gridDim.x - 1 - blockIdx.x], q, kc, vc, block_table, ctx_len, tok_pbase, out,
                             ws, n_heads, n_kv, max_pages, scale);
        return;
    }
    for (int i = blockIdx.x; i < __ldg(counts); i += gridDim.x) {
        AT(wg_item_run)<NWG, ST, RUN>(items[i], q, kc, vc, block_table, ctx_len, tok_pbase, out, ws, n_heads, n_kv,
                             __ldg(counts + 1), scale);
        __syncthreads(); /* the next item reuses the shared memory */
    }
}

#undef WCH
