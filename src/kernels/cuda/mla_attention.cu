/* MLA attention over the latent cache on tensor cores (mma.sync m16n8k16, bf16 in, fp32
 * accumulate): the absorbed formulation for every row, prefill, chunk and decode alike.
 *
 * One CTA per (token, group of 16 query heads: one m16 tile; heads past H are zero rows
 * whose results are dropped), 8 warps; two tokens of one sequence at positions 2i, 2i + 1
 * share a CTA (two m16 tiles, mla_pair), so a prefill reads its keys from L2 half as often.
 * A token's keys 0..pos are walked in blocks of 64
 * positions from absolute 0 (one latent row [c_kv | k_pe] per position serves as key, its
 * first R dims as value); splits of `split` positions (a multiple of 64) from absolute 0
 * each start a fresh softmax state and are merged into the running one in position order.
 * Per block:
 *   S = Q K^T   warp w token tile w / 4 and the block's keys 16 (w % 4) + 0..15, the Dk
 *               dims in one fixed k16 order (Q arrives in bf16, head-major);
 *   softmax     8 threads per head row: the block max (exact in any order), exp, the row's
 *               sum as each thread's 8 values in key order then a fixed xor tree; P rounded
 *               to bf16;
 *   O += P V    warp w the value dims [w R/8, (w+1) R/8) of both tiles, the block's keys
 *               in k16 order.
 * Every value of a row depends on the row's query and the keys only: the other rows of the
 * CTA (other heads, the other token, zero padding) and the other CTAs of the launch change
 * nothing. The second token's key at position 2i + 1 is masked for the first token (its
 * weight is exactly 0, as for the zero row it reads alone). */
#include <cuda_bf16.h>
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/hopper_ptx.cuh"
#include "kernels/cuda/mma_sync_ptx.cuh"

#define MLA_KB 64       /* keys per block */
#define MLA_HEADS 16    /* query heads per CTA and token: one m16 tile */
#define MLA_TOK 2       /* tokens per CTA (a pair of one sequence) */
#define MLA_ROWS (MLA_HEADS * MLA_TOK)
#define MLA_TC_THREADS 256 /* 8 warps; the softmax takes 8 threads per row */
#define MLA_MAX_DKP 576 /* padded key width limit (kv_lora + rope <= 576) */

/* Byte offset of 16-byte chunk ch of row r in a tile of rows of nch chunks (nch a multiple
 * of 8): the chunk index is xor-swizzled within groups of 8 so the 8 rows one ldmatrix reads
 * fall in distinct banks. */
static __device__ __forceinline__ uint32_t mla_sw(int r, int ch, int nch)
{
    return (uint32_t)((r * nch + ((ch & ~7) | ((ch ^ r) & 7))) << 4);
}

/* Positions kb..kb+63 of the sequence (block table bt) into the tile at dst: rows past pos
 * and dims past Dk are zero, so a weight of exactly 0 meets a finite value. */
static __device__ __forceinline__ void mla_load_block(uint32_t dst, const uint16_t *cache, const int32_t *bt, int kb,
                                                      int pos, int Dk, int nch, int tid)
{
    int pg[MLA_KB / INVAR_CUDA_PAGE];
#pragma unroll
    for (int p = 0; p < MLA_KB / INVAR_CUDA_PAGE; p++)
        pg[p] = kb + p * INVAR_CUDA_PAGE <= pos ? __ldg(bt + kb / INVAR_CUDA_PAGE + p) : 0;
    const int dch = Dk / 8;
    for (int i = tid; i < MLA_KB * nch; i += MLA_TC_THREADS) {
        const int j = i / nch, ch = i % nch, p = kb + j;
        const uint32_t off = dst + mla_sw(j, ch, nch);
        if (p <= pos && ch < dch) {
            int page = pg[0];
#pragma unroll
            for (int q = 1; q < MLA_KB / INVAR_CUDA_PAGE; q++) page = j / INVAR_CUDA_PAGE == q ? pg[q] : page;
            cp_async16(off, cache + ((size_t)page * INVAR_CUDA_PAGE + p % INVAR_CUDA_PAGE) * Dk + 8 * ch);
        } else {
            st_shared_zero16(off);
        }
    }
}

/* Whether the CTA of token t runs (1) and takes token t + 1 with it (*paired): tokens of one
 * sequence at positions 2i and 2i + 1, adjacent in the launch, share a CTA. Both then have
 * the same last key block (2i and 2i + 1 fall in one 64-block), so they walk the same blocks
 * and merge at the same places, and the pairing changes no row's arithmetic: it only saves
 * the second token's key loads. The odd one of a pair exits. */
static __device__ __forceinline__ int mla_pair(const int32_t *pos, const int32_t *seq, int t, int T, int *paired)
{
    const int p = pos[t];
    if ((p & 1) && t > 0 && seq[t - 1] == seq[t] && pos[t - 1] == p - 1) return 0;
    *paired = !(p & 1) && t + 1 < T && seq[t + 1] == seq[t] && pos[t + 1] == p + 1;
    return 1;
}

/* Calls f(j, n, e, head row, dim) for each accumulator element o[j][n][e] of a warp's value
 * tiles (first dim d0 + 8 n, rows r0 and r0 + 8 of token tile j) that is a real token, head
 * and dim. */
template <int NT, typename F>
static __device__ __forceinline__ void mla_each_out(int ntok, int hg, int R, int d0, int r0, F f)
{
#pragma unroll
    for (int j = 0; j < MLA_TOK; j++) {
        if (j >= ntok) break;
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int hr = r0 + 8 * (e >> 1), d = d0 + 8 * n + (e & 1);
                if (hr < hg && d < R) f(j, n, e, hr, d);
            }
    }
}

/* NT: value n8-tiles per warp (R padded to 64 NT), even. */
template <int NT>
__global__ void __launch_bounds__(MLA_TC_THREADS, 1)
mla_attention_tc_kernel(const uint16_t *__restrict__ qc, const uint16_t *__restrict__ qpe,
                        const uint16_t *__restrict__ cache,
                        const int32_t *__restrict__ pos_of, const int32_t *__restrict__ tok_seq,
                        const int32_t *__restrict__ btab, int bt_stride, const int32_t *__restrict__ bt_stride_dev,
                        uint16_t *__restrict__ olat, int T, int H, int R, int rope, float scale, int split,
                        int nch, float *__restrict__ ws, int ws_splits)
{
    extern __shared__ __align__(128) uint8_t smem[];
    const int t = blockIdx.x;
    int paired = 0;
    if (!mla_pair(pos_of, tok_seq, t, T, &paired)) return;
    if (bt_stride_dev) bt_stride = *bt_stride_dev;
    const int h0 = blockIdx.y * MLA_HEADS, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int Dk = R + rope, DKP = nch * 8, hg = H - h0 < MLA_HEADS ? H - h0 : MLA_HEADS;
    const int pos0 = pos_of[t], pos = paired ? pos0 + 1 : pos0; /* the CTA's last key */
    const int32_t *bt = btab + (size_t)tok_seq[t] * bt_stride;
    const uint32_t q_s = smem_u32(smem);                                  /* [32][DKP] bf16 */
    const uint32_t k_s = q_s + MLA_ROWS * DKP * 2;                        /* [2][64][DKP] bf16 */
    const uint32_t p_s = k_s + 2 * MLA_KB * DKP * 2;                      /* [32][64] bf16 */
    float *s_s = (float *)(smem + (MLA_ROWS + 2 * MLA_KB) * DKP * 2 + MLA_ROWS * MLA_KB * 2); /* [32][64] */
    float *a_s = s_s + MLA_ROWS * MLA_KB, *b_s = a_s + MLA_ROWS, *l_s = b_s + MLA_ROWS; /* per row */

    /* Split-parallel mode (gridDim.z parts > 1): part z takes splits z, z + parts, ... and
     * writes each split's state to ws for mla_fold_kernel, which folds them in position
     * order with the same operations as the in-CTA merge below: the same bits either way. */
    const int nblk = pos / MLA_KB + 1, sblk = split / MLA_KB, parts = (int)gridDim.z;
    int b = (int)blockIdx.z * sblk;
    if (b >= nblk) return;
    mla_load_block(k_s, cache, bt, b * MLA_KB, pos, Dk, nch, tid);
    cp_async_commit();
    /* Q (bf16, head-major rows h T + t: [c part | rotated q_pe]): row 16 j + i is token t + j's
     * head h0 + i; zero past Dk, past the group's heads and for a missing second token */
    const int rch = R / 8, dch = Dk / 8;
    for (int i = tid; i < MLA_ROWS * nch; i += MLA_TC_THREADS) {
        const int r = i / nch, ch = i % nch, j = r / MLA_HEADS, hr = r % MLA_HEADS;
        const size_t qrow = (size_t)(h0 + hr) * T + t + j;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (hr < hg && ch < dch && (j == 0 || paired))
            v = ch < rch ? *(const uint4 *)(qc + qrow * R + 8 * ch)
                         : *(const uint4 *)(qpe + qrow * rope + 8 * (ch - rch));
        st_shared16(q_s + mla_sw(r, ch, nch), v);
    }
    /* softmax thread: row sr, columns 8 sq .. 8 sq + 7 of the block */
    const int sr = tid >> 3, sq = tid & 7;
    float m_split = -INFINITY, l_split = 0.0f, M_run = -INFINITY, L_run = 0.0f;
    float o[MLA_TOK][NT][4], O[MLA_TOK][NT][4];
#pragma unroll
    for (int j = 0; j < MLA_TOK; j++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[j][n][e] = O[j][n][e] = 0.0f;
    const int r0 = lane >> 2, c0 = 2 * (lane & 3);
    const int sj = warp / 4, skey = 16 * (warp % 4); /* S: this warp's token tile and keys */
    const int spos = sj ? pos : pos0;                /* that token's last key */
    const int ntok = paired ? 2 : 1;
    for (int it = 0; b < nblk; it++) {
        const int bn = (b + 1) % sblk ? b + 1 : b + 1 + (parts - 1) * sblk; /* this part's next block */
        const uint32_t kbuf = k_s + (uint32_t)(it & 1) * (MLA_KB * DKP * 2);
        if (bn < nblk) {
            mla_load_block(k_s + (uint32_t)((it + 1) & 1) * (MLA_KB * DKP * 2), cache, bt, bn * MLA_KB, pos, Dk,
                           nch, tid);
            cp_async_commit();
            cp_async_wait1();
        } else {
            cp_async_wait0();
        }
        __syncthreads();
        /* S for token tile sj and the block's keys skey .. skey + 15 (a missing token's tile
         * stays 0) */
        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        if (sj < ntok)
            for (int kk = 0; kk < DKP / 16; kk++) {
                uint32_t a[4], bb[4];
                ldsm_x4(a, q_s + mla_sw(MLA_HEADS * sj + (lane & 15), 2 * kk + (lane >> 4), nch));
                const int mi = lane >> 3;
                ldsm_x4(bb, kbuf + mla_sw(skey + (mi >> 1) * 8 + (lane & 7), 2 * kk + (mi & 1), nch));
                mma_bf16_16816(s[0], a, bb[0], bb[1]);
                mma_bf16_16816(s[1], a, bb[2], bb[3]);
            }
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = skey + 8 * n + c0 + (e & 1), row = MLA_HEADS * sj + r0 + 8 * (e >> 1);
                s_s[row * MLA_KB + key] = b * MLA_KB + key <= spos ? __fmul_rn(s[n][e], scale) : -INFINITY;
            }
        __syncthreads();
        /* softmax step of row sr (8 threads), P to bf16 */
        {
            float v[8], mb = -INFINITY;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                v[e] = s_s[sr * MLA_KB + 8 * sq + e];
                mb = fmaxf(mb, v[e]);
            }
            mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, 1));
            mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, 2));
            mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, 4));
            const float m_new = fmaxf(m_split, mb); /* finite: key b * 64 <= pos0 <= the row's last */
            const float alpha = m_split == -INFINITY ? 0.0f : expf(__fsub_rn(m_split, m_new));
            float ls = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                v[e] = expf(__fsub_rn(v[e], m_new));
                ls = __fadd_rn(ls, v[e]);
            }
            ls = __fadd_rn(ls, __shfl_xor_sync(0xffffffffu, ls, 1));
            ls = __fadd_rn(ls, __shfl_xor_sync(0xffffffffu, ls, 2));
            ls = __fadd_rn(ls, __shfl_xor_sync(0xffffffffu, ls, 4));
            l_split = __fadd_rn(__fmul_rn(l_split, alpha), ls);
            m_split = m_new;
            st_shared16(p_s + (uint32_t)(sr * 128 + ((sq ^ (sr & 7)) << 4)),
                        make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]),
                                   pack_bf16x2(v[6], v[7])));
            if (sq == 0) a_s[sr] = alpha;
        }
        __syncthreads();
        /* o = o alpha + P V over the warp's value dims, for each token tile */
#pragma unroll
        for (int j = 0; j < MLA_TOK; j++) {
            if (j >= ntok) break;
            const float al0 = a_s[MLA_HEADS * j + r0], al1 = a_s[MLA_HEADS * j + r0 + 8];
#pragma unroll
            for (int n = 0; n < NT; n++) {
                o[j][n][0] = __fmul_rn(o[j][n][0], al0);
                o[j][n][1] = __fmul_rn(o[j][n][1], al0);
                o[j][n][2] = __fmul_rn(o[j][n][2], al1);
                o[j][n][3] = __fmul_rn(o[j][n][3], al1);
            }
        }
#pragma unroll
        for (int kk = 0; kk < MLA_KB / 16; kk++) {
            uint32_t a[MLA_TOK][4];
            const int pr = lane & 15, pc = 2 * kk + (lane >> 4);
#pragma unroll
            for (int j = 0; j < MLA_TOK; j++) {
                const int row = MLA_HEADS * j + pr;
                ldsm_x4(a[j], p_s + (uint32_t)(row * 128 + ((pc ^ (row & 7)) << 4)));
            }
            const int mi = lane >> 3;
#pragma unroll
            for (int n = 0; n < NT; n += 2) {
                uint32_t bb[4];
                ldsm_x4_trans(bb, kbuf + mla_sw(16 * kk + (mi & 1) * 8 + (lane & 7), warp * NT + n + (mi >> 1), nch));
#pragma unroll
                for (int j = 0; j < MLA_TOK; j++) {
                    if (j >= ntok) break;
                    mma_bf16_16816(o[j][n], a[j], bb[0], bb[1]);
                    mma_bf16_16816(o[j][n + 1], a[j], bb[2], bb[3]);
                }
            }
        }
        if (((b + 1) % sblk == 0 || b + 1 == nblk) && parts > 1) { /* split end: its state to ws */
            const int sp = b / sblk;
            const size_t ml = (size_t)T * ws_splits * H * R;
            if (sp < ws_splits) {
                if (sq == 0 && sr % MLA_HEADS < hg && sr / MLA_HEADS < ntok)
                    ((float2 *)(ws + ml))[((size_t)(t + sr / MLA_HEADS) * ws_splits + sp) * H + h0 + sr % MLA_HEADS] =
                        make_float2(m_split, l_split);
                mla_each_out<NT>(ntok, hg, R, warp * 8 * NT + c0, r0, [&](int j, int n, int e, int hr, int d) {
                    ws[(((size_t)(t + j) * ws_splits + sp) * H + h0 + hr) * R + d] = o[j][n][e];
                });
            }
#pragma unroll
            for (int j = 0; j < MLA_TOK; j++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) o[j][n][e] = 0.0f;
            m_split = -INFINITY;
            l_split = 0.0f;
        } else if ((b + 1) % sblk == 0 || b + 1 == nblk) { /* split end: merge it into the running state */
            __syncthreads();
            if (sq == 0) {
                const float M2 = fmaxf(M_run, m_split);
                const float ra = M_run == -INFINITY ? 0.0f : expf(__fsub_rn(M_run, M2)), rb = expf(__fsub_rn(m_split, M2));
                L_run = __fadd_rn(__fmul_rn(L_run, ra), __fmul_rn(l_split, rb));
                M_run = M2;
                a_s[sr] = ra;
                b_s[sr] = rb;
                l_s[sr] = L_run;
            }
            m_split = -INFINITY;
            l_split = 0.0f;
            __syncthreads();
#pragma unroll
            for (int j = 0; j < MLA_TOK; j++) {
                const int q0 = MLA_HEADS * j + r0;
                const float ra0 = a_s[q0], ra1 = a_s[q0 + 8], rb0 = b_s[q0], rb1 = b_s[q0 + 8];
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    O[j][n][0] = __fadd_rn(__fmul_rn(O[j][n][0], ra0), __fmul_rn(o[j][n][0], rb0));
                    O[j][n][1] = __fadd_rn(__fmul_rn(O[j][n][1], ra0), __fmul_rn(o[j][n][1], rb0));
                    O[j][n][2] = __fadd_rn(__fmul_rn(O[j][n][2], ra1), __fmul_rn(o[j][n][2], rb1));
                    O[j][n][3] = __fadd_rn(__fmul_rn(O[j][n][3], ra1), __fmul_rn(o[j][n][3], rb1));
#pragma unroll
                    for (int e = 0; e < 4; e++) o[j][n][e] = 0.0f;
                }
            }
        }
        __syncthreads(); /* the block's buffers are free for the load after bn */
        b = bn;
    }
    if (parts > 1) return;
    mla_each_out<NT>(ntok, hg, R, warp * 8 * NT + c0, r0, [&](int j, int n, int e, int hr, int d) {
        const float l = l_s[MLA_HEADS * j + hr];
        olat[((size_t)(h0 + hr) * T + t + j) * R + d] = __bfloat16_as_ushort(__float2bfloat16_rn(__fdiv_rn(O[j][n][e], l)));
    });
}

/* Split-parallel mode's fold: per (token, head) the splits' states in position order, the
 * in-CTA merge's operations exactly, then the same normalisation. */
__global__ void __launch_bounds__(128)
mla_fold_kernel(const float *__restrict__ ws, int ws_splits, const int32_t *__restrict__ pos_of, int T, int H, int R,
                int split, uint16_t *__restrict__ olat)
{
    const int t = blockIdx.x, h = blockIdx.y, nsp = pos_of[t] / split + 1;
    const float2 *ml = (const float2 *)(ws + (size_t)T * ws_splits * H * R);
    if (nsp > ws_splits) return; /* the host sizes ws for every position */
    for (int d = threadIdx.x; d < R; d += blockDim.x) {
        float M_run = -INFINITY, L_run = 0.0f, O = 0.0f;
        for (int sp = 0; sp < nsp; sp++) {
            const size_t i = ((size_t)t * ws_splits + sp) * H + h;
            const float2 st = ml[i];
            const float M2 = fmaxf(M_run, st.x);
            const float ra = M_run == -INFINITY ? 0.0f : expf(__fsub_rn(M_run, M2)), rb = expf(__fsub_rn(st.x, M2));
            L_run = __fadd_rn(__fmul_rn(L_run, ra), __fmul_rn(st.y, rb));
            M_run = M2;
            O = __fadd_rn(__fmul_rn(O, ra), __fmul_rn(ws[i * R + d], rb));
        }
        olat[((size_t)h * T + t) * R + d] = __bfloat16_as_ushort(__float2bfloat16_rn(__fdiv_rn(O, L_run)));
    }
}

/* Value n8-tiles per warp for R (an even count: the tiles go in pairs; 8 warps): R padded up
 * to 128, 256 or 512. */
static int mla_value_tiles(int R)
{
    int nt = 2;
    while (64 * nt < R) nt *= 2;
    return nt;
}

extern "C" size_t invar_cuda_mla_parts_bytes(int T, int H, int R, int ws_splits)
{
    return sizeof(float) * (size_t)T * (size_t)ws_splits * (size_t)H * (size_t)(R + 2);
}

static int mla_attention(invar_cuda_ctx *ctx, const uint16_t *qc, const uint16_t *qpe, const uint16_t *cache,
                         const int32_t *pos, const int32_t *tok_seq, const int32_t *block_table, int bt_stride,
                         const int32_t *bt_stride_dev, uint16_t *olat, int T, int H, int R, int rope, float scale,
                         int split, const invar_cuda_mla_parts *par)
{
    const int nt = mla_value_tiles(R), Dk = R + rope;
    const int parts = par ? par->parts : 1;
    int dkp = (Dk + 63) / 64 * 64;
    if (dkp < 64 * nt) dkp = 64 * nt; /* the value tiles read the first 64 nt dims */
    if (T < 0 || H <= 0 || R <= 0 || R > 512 || R % 8 || rope < 0 || rope % 8 || (long)H * T > INT32_MAX ||
        dkp > MLA_MAX_DKP || split <= 0 || split % MLA_KB || (H + MLA_HEADS - 1) / MLA_HEADS > 65535 ||
        (((uintptr_t)qc | (uintptr_t)qpe) & 15) || parts < 1 || parts > 65535 ||
        (parts > 1 && (!par->ws || par->ws_splits < 1 || ((uintptr_t)par->ws & 15))))
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "mla_attention: bad shape (R %d, rope %d, split %d, parts %d)",
                               R, rope, split, parts);
    if (T == 0) return 0;
    const size_t smem = (size_t)(MLA_ROWS + 2 * MLA_KB) * dkp * 2 + MLA_ROWS * MLA_KB * 2 +
                        sizeof(float) * (MLA_ROWS * MLA_KB + 3 * MLA_ROWS);
    const dim3 grid(T, (H + MLA_HEADS - 1) / MLA_HEADS, parts);
    const int nch = dkp / 8;
    float *ws = parts > 1 ? par->ws : NULL;
    const int ws_splits = parts > 1 ? par->ws_splits : 0;
#define MLA_LAUNCH(N)                                                                                               \
    do {                                                                                                            \
        if (invar_cuda_check(ctx,                                                                                   \
                             cudaFuncSetAttribute(mla_attention_tc_kernel<N>,                                       \
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),          \
                             "mla_attention smem"))                                                                 \
            return INVAR_CUDA_ECUDA;                                                                                \
        mla_attention_tc_kernel<N><<<grid, MLA_TC_THREADS, smem, ctx->stream>>>(                                    \
            qc, qpe, cache, pos, tok_seq, block_table, bt_stride, bt_stride_dev, olat, T, H, R, rope, scale, split, \
            nch, ws, ws_splits);                                                                                    \
    } while (0)
    switch (nt) {
    case 2: MLA_LAUNCH(2); break;
    case 4: MLA_LAUNCH(4); break;
    default: MLA_LAUNCH(8); break; /* R <= 512 */
    }
#undef MLA_LAUNCH
    if (parts > 1) {
        if (invar_cuda_check(ctx, cudaGetLastError(), "mla_attention launch")) return INVAR_CUDA_ECUDA;
        mla_fold_kernel<<<dim3(T, H), 128, 0, ctx->stream>>>(ws, ws_splits, pos, T, H, R, split, olat);
    }
    return invar_cuda_check(ctx, cudaGetLastError(), "mla_attention launch");
}

extern "C" int invar_cuda_mla_attention(invar_cuda_ctx *ctx, const uint16_t *qc, const uint16_t *qpe,
                                        const uint16_t *cache, const int32_t *pos, const int32_t *tok_seq,
                                        const int32_t *block_table, int bt_stride, uint16_t *olat, int T, int H,
                                        int R, int rope, float scale, int split, const invar_cuda_mla_parts *par)
{
    return mla_attention(ctx, qc, qpe, cache, pos, tok_seq, block_table, bt_stride, NULL, olat, T, H, R, rope, scale,
                         split, par);
}

extern "C" int invar_cuda_mla_attention_dev(invar_cuda_ctx *ctx, const uint16_t *qc, const uint16_t *qpe,
                                            const uint16_t *cache, const int32_t *pos, const int32_t *tok_seq,
                                            const int32_t *block_table, const int32_t *bt_stride_dev,
                                            uint16_t *olat, int T, int H, int R, int rope, float scale, int split,
                                            const invar_cuda_mla_parts *par)
{
    if (!bt_stride_dev) return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "mla_attention: no stride");
    return mla_attention(ctx, qc, qpe, cache, pos, tok_seq, block_table, 1, bt_stride_dev, olat, T, H, R, rope, scale,
                         split, par);
}
