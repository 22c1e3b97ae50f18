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
 * either written out (split items: it.nchunk consecutive splits from it.chunk) or folded into
 * the running one in split order by the same fold as the merge kernel. A warp whose rows are
 * all padding skips the softmax (P = 0 into its rows).
 *
 * Two kernels run these steps, through the functions below (one copy of the per-row
 * arithmetic, so their bits are equal): wg_attn_kernel (this file; every thread copies with
 * cp.async, one __syncthreads per block; decode and short chunks) and ws_attn_kernel
 * (attention_ws_body.cuh: a TMA producer warp and mbarriers, consumer warpgroups taking turns
 * on the tensor cores; prefill).
 *
 * Shared memory (1024-byte aligned, 128-byte swizzle as TMA writes it): Q [NWG][HD/64]
 * [64 rows][64], then ST stages of K [HD/64][64 keys][64] and V (same), 8 KB sub-tiles, then
 * (RUN) the running outputs. RUN = false: a variant for split launches only (every item one
 * split, written out), whose freed space holds a deeper ring. NWG, ST and RUN change the
 * speed, not the per-row arithmetic. */
#define WCH (HD / 8) /* 16-byte chunks per row of HD bf16 */
static_assert(HD % 64 == 0, "head dims in 64-wide swizzle sub-tiles");

/* Byte offset of 16-byte chunk ch of row r in a tile laid out [r / 64][ch / 8][r % 64][64 bf16]
 * with 128-byte rows whose chunks are XOR-swizzled by the row's low 3 bits (with a
 * 1024-byte-aligned base this is the SWIZZLE_128B pattern of the wgmma descriptors and of TMA). */
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

/* Query rows r0 .. r0+nrows-1 of the item (zero past R) into the Q tile, by NTH threads (t:
 * this thread's index among them), in the caller's copy group. */
template <int NTH>
static __device__ __forceinline__ void AT(wload_q)(uint32_t q_s, const invar_cuda_attn_item &it,
                                                   const uint16_t *q, int r0, int nrows, int t, int R, int G,
                                                   int kh, int n_heads)
{
    for (int i = t; i < nrows * WCH; i += NTH) {
        int r = r0 + i / WCH, ch = i % WCH;
        uint32_t off = AT(wsw)(r, ch);
        if (r < R) {
            int tok = it.tok0 + r / G, h = kh * G + r % G;
            cp_async16(q_s + off, q + ((size_t)tok * n_heads + h) * HD + 8 * ch);
        } else {
            st_shared_zero16(q_s + off);
        }
    }
}

/* The thread's two rows of an item (g and g + 8 of its warp's 16; position -1: a padding row)
 * and its warpgroup's extent. */
struct AT(wg_rows) {
    int tpos[2], row[2];
    bool wactive; /* warpgroup-uniform, as every condition around a wgmma: the warpgroup has real rows */
    bool wreal;   /* warp-uniform: the warp holds a real row */
    int wlast;    /* the warpgroup's last position (-1 if none) */
    int wfirst;   /* and its first */
};

static __device__ __forceinline__ AT(wg_rows) AT(wg_rows_of)(const invar_cuda_attn_item &it, int R, int G, int wg,
                                                             int wwarp, int lane)
{
    AT(wg_rows) w;
    const int g = lane >> 2, wr0 = 64 * wg;
    for (int h = 0; h < 2; h++) {
        w.row[h] = wr0 + 16 * wwarp + g + 8 * h;
        w.tpos[h] = w.row[h] < R ? it.pos0 + w.row[h] / G : -1;
    }
    w.wactive = wr0 < R;
    w.wreal = wr0 + 16 * wwarp < R;
    w.wlast = w.wactive ? it.pos0 + (min(R, wr0 + 64) - 1) / G : -1;
    w.wfirst = it.pos0 + wr0 / G;
    return w;
}

/* The KV blocks an item walks: [kb0, kb1), and the end of the keys it reads. */
static __device__ __forceinline__ void AT(wg_blocks)(const invar_cuda_attn_item &it, int ctx_len_s, int *kb0,
                                                     int *kb1, int *kend)
{
    const int last_pos = it.pos0 + it.ntok - 1;
    *kend = min(ctx_len_s, last_pos + 1);
    const int c0 = it.chunk < 0 ? 0 : it.chunk;
    const int c1 = it.chunk < 0 ? last_pos / SPLIT + 1 : it.chunk + it.nchunk;
    *kb0 = c0 * (SPLIT / KB);
    *kb1 = min(c1 * (SPLIT / KB), (*kend - 1) / KB + 1);
}

/* A block ends a split: the split's state is written out or folded next. */
static __device__ __forceinline__ bool AT(wg_split_ends)(int kb, int kb1)
{
    return (kb + 1) % (SPLIT / KB) == 0 || kb + 1 == kb1;
}

/* The online state of the thread's two rows: the current split's (mc, lc, o) and the folded
 * (mrun, lrun) (their outputs live in shared memory, see wg_split_end). */
struct AT(wg_state) {
    float o[HD / 2], mc[2], lc[2], mrun[2], lrun[2];
};

static __device__ __forceinline__ void AT(wg_fresh)(AT(wg_state) &st)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        st.mc[h] = -INFINITY;
        st.lc[h] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < HD / 2; i++) st.o[i] = 0.0f;
}

/* S = Q K^T: 64 rows x KB keys, head dims in k16 steps in order (issue only). */
static __device__ __forceinline__ void AT(wg_issue_s)(float *s, uint32_t qa, uint32_t kbuf)
{
#pragma unroll
    for (int hh = 0; hh < HD / 64; hh++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wgmma_m64n64k16_ss(s, smem_desc_sw128(qa + hh * 8192 + 32 * kk),
                               smem_desc_sw128(kbuf + hh * 8192 + 32 * kk), hh + kk > 0);
}

/* O += P V: keys in k16 steps in order; each 64-dim half of O is one accumulator (issue only). */
static __device__ __forceinline__ void AT(wg_issue_pv)(float *o, uint32_t (*pa)[4], uint32_t vbuf)
{
#pragma unroll
    for (int j = 0; j < KB / 16; j++)
#pragma unroll
        for (int hh = 0; hh < HD / 64; hh++)
            wgmma_m64n64k16_rs_bt(o + 32 * hh, pa[j], smem_desc_sw128_mn(vbuf + hh * 8192 + j * 2048), 1);
}

/* Mask, scale and online softmax of the block at kbase for the thread's rows: s (the S
 * accumulator) becomes P, packed into pa as the A operand of P V; o is rescaled. A warp
 * without real rows (decode: 4 of 64 rows are real) skips it and gives P = 0: wgmma rows are
 * independent, so no real row sees the difference; its own rows are never written.
 * Warp-uniform (the shuffles below). */
static __device__ __forceinline__ void AT(wg_softmax)(float *s, AT(wg_state) &st, const AT(wg_rows) &rw, int kbase,
                                                      float sl2, int tig, uint32_t (*pa)[4])
{
    if (!rw.wreal) {
#pragma unroll
        for (int j = 0; j < KB / 16; j++) pa[j][0] = pa[j][1] = pa[j][2] = pa[j][3] = 0u;
        return;
    }
    /* Rows g (h = 0) and g + 8 (h = 1). Keys past a row's position exist only in the
     * warpgroup's diagonal blocks. */
    const bool diag = kbase + KB - 1 > rw.wfirst;
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float v[KB / 4]; /* the thread's KB / 4 scores of the row, in column order */
#pragma unroll
        for (int n = 0; n < KB / 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int key = kbase + 8 * n + 2 * tig + e;
                v[2 * n + e] = !diag || key <= rw.tpos[h] ? s[4 * n + 2 * h + e] : -INFINITY;
            }
        float mx = tree_reduce<KB / 4, op_max>(v);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        /* Rounding is monotonic, so max(s) * sl2 is the max of the scaled scores. */
        const float mnew = fmaxf(st.mc[h], __fmul_rn(mx, sl2));
        const float muse = mnew == -INFINITY ? 0.0f : mnew;
        alpha[h] = ex2(__fsub_rn(st.mc[h], muse));
        st.mc[h] = mnew;
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
        st.lc[h] = __fadd_rn(__fmul_rn(st.lc[h], alpha[h]), rs);
    }
    /* o * 1 is o: the rescale is skipped when no row of the warp needs it. */
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            st.o[4 * n] = __fmul_rn(st.o[4 * n], alpha[0]);
            st.o[4 * n + 1] = __fmul_rn(st.o[4 * n + 1], alpha[0]);
            st.o[4 * n + 2] = __fmul_rn(st.o[4 * n + 2], alpha[1]);
            st.o[4 * n + 3] = __fmul_rn(st.o[4 * n + 3], alpha[1]);
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
}

/* The split that block kb ends: its (m, l, o) out (split items, or RUN = false), or folded
 * into the running state (whole items); then a fresh state for the next split. orun: this
 * thread's running outputs, element i at orun[i * NT] (a warp's accesses are one row of
 * banks). fold_ctl != 0 (a negative control, never in real use): items of an odd number of
 * tokens fold with a fused multiply-add, so a row's bits follow the tile it landed in. */
#define ORUN(i) orun[(i) * NT]
template <bool RUN, int NT>
static __device__ __forceinline__ void AT(wg_split_end)(int kb, const invar_cuda_attn_item &it, AT(wg_state) &st,
                                                        const AT(wg_rows) &rw, float *orun, float *ws,
                                                        const int32_t *tok_pbase, int n_heads, int kh, int G,
                                                        int tig, int fold_ctl)
{
    const int c = kb / (SPLIT / KB), sbase = c * SPLIT;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const bool has = rw.wactive && rw.tpos[h] >= sbase; /* the row has keys in the split */
        if (!RUN || it.chunk >= 0) { /* !RUN: split launches only (a whole item there would
                                      * write every split's partial: still right) */
            if (!has) continue;
            int tok = it.tok0 + rw.row[h] / G, head = kh * G + rw.row[h] % G;
            float *dst = ws + ((size_t)(tok_pbase[tok] + c) * n_heads + head) * (HD + 4);
            if (tig == 0) {
                dst[0] = st.mc[h];
                dst[1] = st.lc[h];
            }
#pragma unroll
            for (int n = 0; n < HD / 8; n++)
                *(float2 *)(dst + 4 + 8 * n + 2 * tig) = make_float2(st.o[4 * n + 2 * h], st.o[4 * n + 2 * h + 1]);
        } else if (c == 0) {
            st.mrun[h] = st.mc[h];
            st.lrun[h] = st.lc[h];
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                ORUN(4 * n + 2 * h) = st.o[4 * n + 2 * h];
                ORUN(4 * n + 2 * h + 1) = st.o[4 * n + 2 * h + 1];
            }
        } else if (has) {
            float mn, a, b;
            fold_scales(st.mrun[h], st.mc[h], &mn, &a, &b);
            st.mrun[h] = mn;
            if (fold_ctl && (it.ntok & 1)) {
                st.lrun[h] = __fmaf_rn(st.lrun[h], a, __fmul_rn(st.lc[h], b));
#pragma unroll
                for (int n = 0; n < HD / 8; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int i = 4 * n + 2 * h + e;
                        ORUN(i) = __fmaf_rn(ORUN(i), a, __fmul_rn(st.o[i], b));
                    }
            } else {
                st.lrun[h] = fold_val(st.lrun[h], st.lc[h], a, b);
#pragma unroll
                for (int n = 0; n < HD / 8; n++) {
                    ORUN(4 * n + 2 * h) = fold_val(ORUN(4 * n + 2 * h), st.o[4 * n + 2 * h], a, b);
                    ORUN(4 * n + 2 * h + 1) = fold_val(ORUN(4 * n + 2 * h + 1), st.o[4 * n + 2 * h + 1], a, b);
                }
            }
        }
    }
    AT(wg_fresh)(st); /* after both rows: the continue above skips */
}

/* Whole items: the folded output, normalised, as bf16. */
template <int NT>
static __device__ __forceinline__ void AT(wg_write_out)(const invar_cuda_attn_item &it, const AT(wg_state) &st,
                                                        const AT(wg_rows) &rw, const float *orun, uint16_t *out,
                                                        int n_heads, int kh, int G, int tig)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (rw.tpos[h] < 0) continue;
        int tok = it.tok0 + rw.row[h] / G, head = kh * G + rw.row[h] % G;
        __nv_bfloat162 *dst = (__nv_bfloat162 *)(out + ((size_t)tok * n_heads + head) * HD + 2 * tig);
#pragma unroll
        for (int n = 0; n < HD / 8; n++)
            dst[4 * n] = __floats2bfloat162_rn(__fdiv_rn(ORUN(4 * n + 2 * h), st.lrun[h]),
                                               __fdiv_rn(ORUN(4 * n + 2 * h + 1), st.lrun[h]));
    }
#undef ORUN
}

/* ---- the cp.async kernel: every thread copies, one __syncthreads per block ---- */

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
    float *orun = (float *)(smem_raw + (q_s - raw) + MR * HD * 2 + 2 * ST * KV_TILE) + threadIdx.x; /* RUN only */
    const int kh = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wwarp = (tid >> 5) & 3, tig = lane & 3;
    const int G = n_heads / n_kv, R = it.ntok * G;
    const int32_t *bt = block_table + (size_t)it.seq * max_pages;
    const float sl2 = __fmul_rn(scale, 1.44269504088896341f); /* scores in log2 units */

    AT(wload_q)<NT>(q_s, it, q, 0, MR, tid, R, G, kh, n_heads); /* in the first copy group */
    int kb0, kb1, kend;
    AT(wg_blocks)(it, ctx_len[it.seq], &kb0, &kb1, &kend);
    /* Prologue: blocks kb0 .. kb0+ST-2, one copy group each (empty past kb1). */
#pragma unroll
    for (int i = 0; i < ST - 1; i++) {
        if (kb0 + i < kb1)
            AT(wload_kv)<NT>(k_s + i * KV_TILE, v_s + i * KV_TILE, kc, vc, bt, (kb0 + i) * KB, kend, kh, n_kv, tid);
        cp_async_commit();
    }
    const AT(wg_rows) rw = AT(wg_rows_of)(it, R, G, wg, wwarp, lane);
    const uint32_t qa = q_s + (uint32_t)wg * (64 * HD * 2);
    AT(wg_state) st;
    AT(wg_fresh)(st);
    st.mrun[0] = st.mrun[1] = st.lrun[0] = st.lrun[1] = 0.0f;

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
        if (rw.wactive && kbase <= rw.wlast) {
            float s[KB / 2];
#pragma unroll
            for (int i = 0; i < KB / 2; i++) s[i] = 0.0f;
            fence_regs<KB / 2>(s);
            wgmma_fence();
            AT(wg_issue_s)(s, qa, kbuf);
            wgmma_commit();
            wgmma_wait0();
            fence_regs<KB / 2>(s);
            uint32_t pa[KB / 16][4];
            AT(wg_softmax)(s, st, rw, kbase, sl2, tig, pa);
            fence_regs<HD / 2>(st.o);
            fence_regs_u<KB / 4>(&pa[0][0]);
            wgmma_fence();
            AT(wg_issue_pv)(st.o, pa, vbuf);
            wgmma_commit();
            wgmma_wait0();
            fence_regs<HD / 2>(st.o);
        }
        if (AT(wg_split_ends)(kb, kb1))
            AT(wg_split_end)<RUN, NT>(kb, it, st, rw, orun, ws, tok_pbase, n_heads, kh, G, tig, 0);
    }
    cp_async_wait<0>(); /* only empty groups are left; none may outlive the item */
    if constexpr (RUN) {
        if (it.chunk < 0) AT(wg_write_out)<NT>(it, st, rw, orun, out, n_heads, kh, G, tig);
    }
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
/* WCH and ORUN stay defined for attention_ws_body.cuh, which undefines them. */
