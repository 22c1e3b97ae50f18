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

/* The cache pages of block kb (0 past kend). */
static __device__ __forceinline__ void AT(wg_pages)(const int32_t *bt, int kb, int kend, int *pg)
{
#pragma unroll
    for (int p = 0; p < KB / PAGE; p++) pg[p] = kb * KB + p * PAGE < kend ? __ldg(bt + kb * (KB / PAGE) + p) : 0;
}

/* Keys and values of positions kbase .. kbase+KB-1, on pages pg, into the tiles at ks / vs;
 * positions at or past kend (not cached, or past every row's position) are zero, so a masked
 * weight of exactly 0 meets a finite value. Thread tid copies chunk ch of rows r, r + RP,
 * r + 2 RP, ...: the page of pass k is known at compile time up to r / PAGE (a select when a
 * pass spans two pages), so no per-chunk page search. */
template <int NT>
static __device__ __forceinline__ void AT(wload_kv)(uint32_t ks, uint32_t vs, const uint16_t *kc,
                                                    const uint16_t *vc, const int *pg, int kbase,
                                                    int kend, int kh, int n_kv, int tid)
{
    constexpr int RP = NT / WCH; /* rows per pass */
    static_assert(NT % WCH == 0 && KB % RP == 0 && (RP % PAGE == 0 || PAGE % RP == 0), "whole passes");
    const int r = tid / WCH, ch = tid % WCH;
    const size_t col = (size_t)kh * PAGE * HD + 8 * ch;
#pragma unroll
    for (int k = 0; k < KB / RP; k++) {
        const int j = r + RP * k, pos = kbase + j;
        const uint32_t off = AT(wsw)(j, ch);
        if (pos < kend) {
            int page = pg[RP * k / PAGE];
            if constexpr (RP > PAGE) {
#pragma unroll
                for (int x = 1; x < RP / PAGE; x++) page = r / PAGE == x ? pg[RP * k / PAGE + x] : page;
            }
            const size_t e = ((size_t)page * n_kv * PAGE + pos % PAGE) * HD + col;
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

/* S = Q K^T: 64 rows x KB keys, head dims in k16 steps in order, from a fresh sum (issue only;
 * s is written, not read). */
static __device__ __forceinline__ void AT(wg_issue_s)(float *s, uint32_t qa, uint32_t kbuf)
{
    const sdesc dq = sdesc_of(smem_desc_sw128(qa)), dk = sdesc_of(smem_desc_sw128(kbuf));
#pragma unroll
    for (int hh = 0; hh < HD / 64; hh++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            if (hh + kk == 0)
                wgmma_m64n64k16_ss_fresh(s, sdesc_at(dq, 0), sdesc_at(dk, 0));
            else
                wgmma_m64n64k16_ss(s, sdesc_at(dq, hh * 8192 + 32 * kk), sdesc_at(dk, hh * 8192 + 32 * kk), 1);
}

/* O += P V: keys in k16 steps in order (issue only). PV128 (head_dim 128): one m64n128k16 per
 * k16 step over all of O (the accumulator fragment of m64n128 is that of the two m64n64
 * halves side by side); else one m64n64k16 per 64-dim half. */
template <bool PV128>
static __device__ __forceinline__ void AT(wg_issue_pv)(float *o, uint32_t (*pa)[4], uint32_t vbuf)
{
    const sdesc dv = sdesc_of(PV128 && HD == 128 ? smem_desc_sw128_mn2(vbuf) : smem_desc_sw128_mn(vbuf));
#pragma unroll
    for (int j = 0; j < KB / 16; j++) {
        if constexpr (PV128 && HD == 128) {
            wgmma_m64n128k16_rs_bt(o, pa[j], sdesc_at(dv, j * 2048), 1);
        } else {
#pragma unroll
            for (int hh = 0; hh < HD / 64; hh++)
                wgmma_m64n64k16_rs_bt(o + 32 * hh, pa[j], sdesc_at(dv, hh * 8192 + j * 2048), 1);
        }
    }
}

/* Mask, scale and online softmax of the block at kbase for the thread's rows: from s (the S
 * accumulator, only read: to the compiler it may still be a wgmma operand) the weights vv[h]
 * (the thread's KB / 4 columns of row g + 8h, in column order) and the factors alpha that O
 * must be rescaled by (wg_rescale, once O holds the previous blocks' P V). A warp without real
 * rows (decode: 4 of 64 rows are real) skips it and gives P = 0, alpha = 1: wgmma rows are
 * independent, so no real row sees the difference; its own rows are never written.
 * Warp-uniform (the shuffles below). */
template <bool MASK>
static __device__ __forceinline__ void AT(wg_softmax_rows)(const float *s, AT(wg_state) &st, const AT(wg_rows) &rw,
                                                           int kbase, float sl2, int tig, float (*vv)[KB / 4],
                                                           float *alpha)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float *v = vv[h];
#pragma unroll
        for (int n = 0; n < KB / 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int key = kbase + 8 * n + 2 * tig + e;
                v[2 * n + e] = !MASK || key <= rw.tpos[h] ? s[4 * n + 2 * h + e] : -INFINITY;
            }
        float mx = tree_reduce<KB / 4, op_max>(v);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        /* Rounding is monotonic, so max(s) * sl2 is the max of the scaled scores. */
        const float mnew = next_max(st.mc[h], __fmul_rn(mx, sl2));
        const float muse = mnew == -INFINITY ? 0.0f : mnew;
        alpha[h] = ex2(__fsub_rn(st.mc[h], muse));
        st.mc[h] = mnew;
#pragma unroll
        for (int i = 0; i < KB / 4; i++) v[i] = ex2(__fmaf_rn(v[i], sl2, -muse));
        float rs = tree_reduce<KB / 4, op_add>(v);
        rs = __fadd_rn(rs, __shfl_xor_sync(0xffffffffu, rs, 1));
        rs = __fadd_rn(rs, __shfl_xor_sync(0xffffffffu, rs, 2));
        st.lc[h] = __fadd_rn(__fmul_rn(st.lc[h], alpha[h]), rs);
    }
}

/* False (vv and alpha left unset) for a warp without real rows: its P is 0 (wg_zero_p). The
 * callers zero P only on that path: zeroing vv ahead of the branch cost ~50 instructions in
 * every block (ptxas hoisted it). */
static __device__ __forceinline__ bool AT(wg_softmax_w)(const float *s, AT(wg_state) &st, const AT(wg_rows) &rw,
                                                        int kbase, float sl2, int tig, float (*vv)[KB / 4],
                                                        float *alpha)
{
    if (!rw.wreal) return false;
    /* Keys past a row's position exist only in the warpgroup's diagonal blocks: the mask is
     * compiled into those alone (a key below every row's position keeps its score either way). */
    if (kbase + KB - 1 > rw.wfirst)
        AT(wg_softmax_rows)<true>(s, st, rw, kbase, sl2, tig, vv, alpha);
    else
        AT(wg_softmax_rows)<false>(s, st, rw, kbase, sl2, tig, vv, alpha);
    return true;
}

static __device__ __forceinline__ void AT(wg_zero_p)(uint32_t (*pa)[4])
{
#pragma unroll
    for (int j = 0; j < KB / 16; j++) pa[j][0] = pa[j][1] = pa[j][2] = pa[j][3] = 0u;
}

/* P (the weights, bf16) as the A operand of P V: k16 slice j is columns 16j .. 16j+15 of S
 * (fragment element 4n + 2h + e of S is vv[h][2n + e]). */
static __device__ __forceinline__ void AT(wg_pack_p)(float (*vv)[KB / 4], uint32_t (*pa)[4])
{
#pragma unroll
    for (int j = 0; j < KB / 16; j++) {
        pa[j][0] = pack_bf16x2(vv[0][4 * j], vv[0][4 * j + 1]);
        pa[j][1] = pack_bf16x2(vv[1][4 * j], vv[1][4 * j + 1]);
        pa[j][2] = pack_bf16x2(vv[0][4 * j + 2], vv[0][4 * j + 3]);
        pa[j][3] = pack_bf16x2(vv[1][4 * j + 2], vv[1][4 * j + 3]);
    }
}

/* O of the thread's rows times alpha; o * 1 is o, so it is skipped when no row of the warp
 * needs it. Warp-uniform. */
static __device__ __forceinline__ void AT(wg_rescale)(float *o, const float *alpha)
{
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            o[4 * n] = __fmul_rn(o[4 * n], alpha[0]);
            o[4 * n + 1] = __fmul_rn(o[4 * n + 1], alpha[0]);
            o[4 * n + 2] = __fmul_rn(o[4 * n + 2], alpha[1]);
            o[4 * n + 3] = __fmul_rn(o[4 * n + 3], alpha[1]);
        }
    }
}

/* All three, for a block whose previous blocks' P V has completed. */
static __device__ __forceinline__ void AT(wg_softmax)(const float *s, AT(wg_state) &st, const AT(wg_rows) &rw, int kbase,
                                                      float sl2, int tig, uint32_t (*pa)[4])
{
    float vv[2][KB / 4], alpha[2];
    if (AT(wg_softmax_w)(s, st, rw, kbase, sl2, tig, vv, alpha)) {
        AT(wg_rescale)(st.o, alpha);
        AT(wg_pack_p)(vv, pa);
    } else {
        AT(wg_zero_p)(pa);
    }
}

/* The split that block kb ends: its (m, l, o) out (split items, or RUN = false), or folded
 * into the running state (whole items); then a fresh state for the next split. orun: this
 * thread's running outputs, elements 4n .. 4n+3 (rows g: 4n, 4n+1; g + 8: 4n+2, 4n+3) at
 * orun[n * NT] (a warp's 16-byte accesses are consecutive). fold_ctl != 0 (a negative control,
 * never in real use): items of an odd number of tokens fold with a fused multiply-add, so a
 * row's bits follow the tile it landed in. */
template <bool RUN, int NT>
static __device__ __forceinline__ void AT(wg_split_end)(int kb, const invar_cuda_attn_item &it, AT(wg_state) &st,
                                                        const AT(wg_rows) &rw, float4 *orun, float *ws,
                                                        const int32_t *tok_pbase, int n_heads, int kh, int G,
                                                        int tig, int fold_ctl)
{
    const int c = kb / (SPLIT / KB), sbase = c * SPLIT;
    bool has[2]; /* the row has keys in the split */
#pragma unroll
    for (int h = 0; h < 2; h++) has[h] = rw.wactive && rw.tpos[h] >= sbase;
    if (!RUN || it.chunk >= 0) { /* !RUN: split launches only (a whole item there would write
                                  * every split's partial: still right) */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (!has[h]) continue;
            int tok = it.tok0 + rw.row[h] / G, head = kh * G + rw.row[h] % G;
            float *dst = ws + ((size_t)(tok_pbase[tok] + c) * n_heads + head) * (HD + 4);
            if (tig == 0) {
                dst[0] = st.mc[h];
                dst[1] = st.lc[h];
            }
#pragma unroll
            for (int n = 0; n < HD / 8; n++)
                *(float2 *)(dst + 4 + 8 * n + 2 * tig) = make_float2(st.o[4 * n + 2 * h], st.o[4 * n + 2 * h + 1]);
        }
    } else if (c == 0) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            st.mrun[h] = st.mc[h];
            st.lrun[h] = st.lc[h];
        }
#pragma unroll
        for (int n = 0; n < HD / 8; n++)
            orun[n * NT] = make_float4(st.o[4 * n], st.o[4 * n + 1], st.o[4 * n + 2], st.o[4 * n + 3]);
    } else if (has[0] || has[1]) {
        const bool ctl = fold_ctl && (it.ntok & 1);
        float a[2] = {1.0f, 1.0f}, b[2] = {0.0f, 0.0f};
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (!has[h]) continue;
            float mn;
            fold_scales(st.mrun[h], st.mc[h], &mn, &a[h], &b[h]);
            st.mrun[h] = mn;
            st.lrun[h] = fold_pick(st.lrun[h], st.lc[h], a[h], b[h], ctl);
        }
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            float4 r = orun[n * NT];
            if (has[0]) {
                r.x = fold_pick(r.x, st.o[4 * n], a[0], b[0], ctl);
                r.y = fold_pick(r.y, st.o[4 * n + 1], a[0], b[0], ctl);
            }
            if (has[1]) {
                r.z = fold_pick(r.z, st.o[4 * n + 2], a[1], b[1], ctl);
                r.w = fold_pick(r.w, st.o[4 * n + 3], a[1], b[1], ctl);
            }
            orun[n * NT] = r;
        }
    }
    AT(wg_fresh)(st);
}

/* Whole items: the folded output, normalised, as bf16. */
template <int NT>
static __device__ __forceinline__ void AT(wg_write_out)(const invar_cuda_attn_item &it, const AT(wg_state) &st,
                                                        const AT(wg_rows) &rw, const float4 *orun, uint16_t *out,
                                                        int n_heads, int kh, int G, int tig)
{
    __nv_bfloat162 *dst[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int tok = it.tok0 + rw.row[h] / G, head = kh * G + rw.row[h] % G;
        dst[h] = (__nv_bfloat162 *)(out + ((size_t)tok * n_heads + head) * HD + 2 * tig);
    }
#pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        const float4 r = orun[n * NT];
        if (rw.tpos[0] >= 0)
            dst[0][4 * n] = __floats2bfloat162_rn(__fdiv_rn(r.x, st.lrun[0]), __fdiv_rn(r.y, st.lrun[0]));
        if (rw.tpos[1] >= 0)
            dst[1][4 * n] = __floats2bfloat162_rn(__fdiv_rn(r.z, st.lrun[1]), __fdiv_rn(r.w, st.lrun[1]));
    }
}

/* Split items with done != NULL: the merge in the kernel (no merge launch). Each CTA adds
 * its item's split count to the tile's counter (done[tok0 n_kv + kh], zero between launches)
 * once its partials are out; the CTA that completes the count folds the tile's rows with the
 * merge kernel's merge_row, in split order from split 0, and puts the counter back to 0.
 * Which CTA merges, and when, changes no bit: the fold reads the same partials in the same
 * order with the same operations as attn_merge_kernel. The shared memory at smem holds the
 * vote (the Q tile: no longer read once every warpgroup is past its last block). */
template <int NT>
static __device__ __forceinline__ void AT(wg_merge_if_last)(const invar_cuda_attn_item &it, int32_t *done,
                                                            const float *ws, const int32_t *tok_pbase,
                                                            uint16_t *out, int n_heads, int n_kv, int kh, int G,
                                                            int reverse, volatile int *vote)
{
    __threadfence(); /* this thread's partials, device-wide, before the count says they are out */
    __syncthreads();
    if (threadIdx.x == 0) {
        const int nsplit = (it.pos0 + it.ntok - 1) / SPLIT + 1, slot = it.tok0 * n_kv + kh;
        const int last = atomicAdd(done + slot, it.nchunk) + it.nchunk == nsplit;
        if (last) atomicExch(done + slot, 0); /* every split of the tile is counted */
        *vote = last;
    }
    __syncthreads();
    if (!*vote) return;
    __threadfence(); /* the other CTAs' partials, counted before this CTA's add, are seen */
    const int R = it.ntok * G, lane = threadIdx.x & 31;
    for (int r = threadIdx.x >> 5; r < R; r += NT / 32) {
        const int tok = it.tok0 + r / G, head = kh * G + r % G;
        AT(merge_row)<HD / 32>(ws + ((size_t)tok_pbase[tok] * n_heads + head) * (HD + 4), (size_t)n_heads * (HD + 4),
                               (it.pos0 + r / G) / SPLIT + 1, reverse, lane, 0,
                               out + ((size_t)tok * n_heads + head) * HD);
    }
}

/* ---- the cp.async kernel: every thread copies, one __syncthreads per block ---- */

template <int NWG, int ST, bool RUN, bool PV128>
static __device__ __forceinline__ void AT(wg_item_run)(const invar_cuda_attn_item it, const uint16_t *__restrict__ q,
            const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
            const int32_t *__restrict__ block_table, const int32_t *__restrict__ ctx_len,
            const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
            float *__restrict__ ws, int n_heads, int n_kv, int max_pages, float scale, int32_t *done,
            int reverse)
{
    constexpr int NT = 128 * NWG, MR = 64 * NWG;
    static_assert(ST >= 2, "a copy stage in flight while one is read");
    constexpr uint32_t KV_TILE = KB * HD * 2;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw), q_s = (raw + 1023u) & ~1023u; /* host adds 1 KB slack */
    const uint32_t k_s = q_s + MR * HD * 2;      /* [ST] K tiles */
    const uint32_t v_s = k_s + ST * KV_TILE;     /* [ST] V tiles */
    float4 *orun = (float4 *)(smem_raw + (q_s - raw) + MR * HD * 2 + 2 * ST * KV_TILE) + threadIdx.x; /* RUN only */
    const int kh = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    /* The warpgroup index through a shuffle: warp-uniform to the compiler too, so that the
     * descriptors built from it live in uniform registers. */
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0), wwarp = (tid >> 5) & 3, tig = lane & 3;
    const int G = n_heads / n_kv, R = it.ntok * G;
    const int32_t *bt = block_table + (size_t)it.seq * max_pages;
    const float sl2 = __fmul_rn(scale, 1.44269504088896341f); /* scores in log2 units */

    AT(wload_q)<NT>(q_s, it, q, 0, MR, tid, R, G, kh, n_heads); /* in the first copy group */
    int kb0, kb1, kend;
    AT(wg_blocks)(it, ctx_len[it.seq], &kb0, &kb1, &kend);
    /* Prologue: blocks kb0 .. kb0+ST-2, one copy group each (empty past kb1). */
    int pg[KB / PAGE];
#pragma unroll
    for (int i = 0; i < ST - 1; i++) {
        if (kb0 + i < kb1) {
            AT(wg_pages)(bt, kb0 + i, kend, pg);
            AT(wload_kv)<NT>(k_s + i * KV_TILE, v_s + i * KV_TILE, kc, vc, pg, (kb0 + i) * KB, kend, kh, n_kv, tid);
        }
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
        const int nb = kb + ST - 1; /* the block this iteration issues: its pages are looked up
                                     * before the wait, so that their latency hides under it */
        AT(wg_pages)(bt, nb, kend, pg);
        cp_async_wait<ST - 2>(); /* this thread's copies of block kb (and of Q) are done */
        fence_proxy_async();     /* its generic-proxy writes, before the wgmma (async proxy) reads */
        __syncthreads();         /* everyone's copies are in; everyone is done with block kb-1 */
        {   /* the block ST-1 ahead, into the stage block kb-1 used */
            const uint32_t sb = (uint32_t)((bi + ST - 1) % ST) * KV_TILE;
            if (nb < kb1) AT(wload_kv)<NT>(k_s + sb, v_s + sb, kc, vc, pg, nb * KB, kend, kh, n_kv, tid);
            cp_async_commit();
        }
        const int kbase = kb * KB;
        if (rw.wactive && kbase <= rw.wlast) {
            float s[KB / 2];
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
            AT(wg_issue_pv)<PV128>(st.o, pa, vbuf);
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
    if constexpr (!RUN) { /* the split-only variants (decode); the others spill with it */
        if (done && it.chunk >= 0)
            AT(wg_merge_if_last)<NT>(it, done, ws, tok_pbase, out, n_heads, n_kv, kh, G, reverse,
                                     (volatile int *)(smem_raw + (q_s - raw)));
    }
}

/* counts == NULL: CTA x runs item grid-1-x (the items of a sequence come in position order,
 * so the longest start first and the causal tail is short). Otherwise counts = {n_items,
 * max_pages} in device memory and the CTAs stride over the items (a replayed CUDA graph).
 * Either way an item is the same instruction sequence, and NWG = 1 or 2 runs the same
 * per-warpgroup code. */
template <int NWG, int ST, bool RUN, bool PV128>
__global__ void __launch_bounds__(128 * NWG, NWG == 1 && ST <= 3 ? 2 : 1)
AT(wg_attn_kernel)(const invar_cuda_attn_item *__restrict__ items, const uint16_t *__restrict__ q,
            const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
            const int32_t *__restrict__ block_table, const int32_t *__restrict__ ctx_len,
            const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
            float *__restrict__ ws, int n_heads, int n_kv, int max_pages, float scale,
            const int32_t *__restrict__ counts, int32_t *done, int reverse)
{
    if (!counts) {
        AT(wg_item_run)<NWG, ST, RUN, PV128>(items[gridDim.x - 1 - blockIdx.x], q, kc, vc, block_table, ctx_len, tok_pbase, out,
                             ws, n_heads, n_kv, max_pages, scale, done, reverse);
        return;
    }
    for (int i = blockIdx.x; i < __ldg(counts); i += gridDim.x) {
        AT(wg_item_run)<NWG, ST, RUN, PV128>(items[i], q, kc, vc, block_table, ctx_len, tok_pbase, out, ws, n_heads, n_kv,
                             __ldg(counts + 1), scale, done, reverse);
        __syncthreads(); /* the next item reuses the shared memory */
    }
}
/* WCH stays defined for attention_ws_body.cuh, which undefines it. */
