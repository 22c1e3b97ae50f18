/* The attention kernels for one head_dim, included by attention.cu once per supported
 * value with HD (the head_dim) and AT(name) (a per-head_dim name) defined. The PV layout
 * gives each lane 4 output dims, so head_dim 64 leaves lanes 16..31 without output; the
 * reduction of every element is the same sequence for either size (only HD changes). */
/* Key/value row at offset `off` of page `page`, KV head kh. */
static __device__ __forceinline__ const uint16_t *AT(page_row)(const uint16_t *cache, int page, int off,
                                                           int kh, int n_kv)
{
    return cache + (((size_t)page * n_kv + kh) * PAGE + off) * HD;
}


/* oc[k] += sum over slots j < nvalid, in order, of p[row][j] * v[j][4 lane .. 4 lane + 3] for
 * rows warp + 8k, k < nk; nk is a constant at every call site, so the loop is unrolled per
 * count. */
static __device__ __forceinline__ void AT(pv_rows)(float (*oc)[4], const float *p_s, const uint16_t *v_s,
                                               int nvalid, int warp, int lane, int nk)
{
    if (4 * lane >= HD) return; /* head_dim 64: lanes 16..31 hold no output dims */
    for (int j = 0; j < nvalid; j++) {
        uint2 vv = *(const uint2 *)(v_s + j * HD + 4 * lane);
        const uint16_t *pv = (const uint16_t *)&vv;
        float v0 = bf(pv[0]), v1 = bf(pv[1]), v2 = bf(pv[2]), v3 = bf(pv[3]);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (k < nk) {
                float p = p_s[(warp + 8 * k) * SPLIT + j];
                oc[k][0] = __fmaf_rn(p, v0, oc[k][0]);
                oc[k][1] = __fmaf_rn(p, v1, oc[k][1]);
                oc[k][2] = __fmaf_rn(p, v2, oc[k][2]);
                oc[k][3] = __fmaf_rn(p, v3, oc[k][3]);
            }
        }
    }
}

/* One work item: a tile of query rows (all of a KV head's query heads for ntok consecutive
 * tokens of one sequence) against one split (chunk >= 0) or all of its splits (chunk < 0). */
static __device__ __noinline__ void AT(attn_item_run)(const invar_cuda_attn_item it, const uint16_t *__restrict__ q,
            const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
            const int32_t *__restrict__ block_table, const int32_t *__restrict__ ctx_len,
            const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
            float *__restrict__ ws, int n_heads, int n_kv, int max_pages, float scale, int rmax)
{
    extern __shared__ float sm[];
    const int kh = blockIdx.y;
    const int G = n_heads / n_kv;
    const int R = it.ntok * G;
    float *q_s = sm;                            /* [R][HD], pre-scaled */
    float *p_s = q_s + rmax * HD;               /* [R][SPLIT] scores, then weights */
    float *mc_s = p_s + rmax * SPLIT;           /* [R] split max */
    float *lc_s = mc_s + rmax;                  /* [R] split sum */
    float *m_s = lc_s + rmax;                   /* [R] running max */
    float *l_s = m_s + rmax;                    /* [R] running sum */
    float *o_s = l_s + rmax;                    /* [R][HD] running output (unnormalised) */
    uint16_t *v_s = (uint16_t *)(o_s + rmax * HD); /* [SPLIT][HD] the split's values */
    __shared__ int pg_s[SPLIT / PAGE];             /* the split's pages */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t *bt = block_table + (size_t)it.seq * max_pages;
    const int clen = ctx_len[it.seq];

    for (int i = tid; i < R * HD; i += ATT_THREADS) {
        int r = i / HD, d = i % HD;
        int tok = it.tok0 + r / G, h = kh * G + r % G;
        q_s[i] = __fmul_rn(bf(q[((size_t)tok * n_heads + h) * HD + d]), scale);
    }
    /* PV thread layout: dims 4*lane .. 4*lane+3 of rows warp, warp+8, ... */
    const int last_pos = it.pos0 + it.ntok - 1;
    int c0 = it.chunk, c1 = it.chunk + 1;
    if (it.chunk < 0) {
        c0 = 0;
        c1 = last_pos / SPLIT + 1;
    }
    __syncthreads();
    for (int c = c0; c < c1; c++) {
        const int base = c * SPLIT;
        int nvalid = min(SPLIT, min(clen, last_pos + 1) - base);
        if (tid < SPLIT / PAGE && tid * PAGE < nvalid) pg_s[tid] = bt[base / PAGE + tid];
        __syncthreads();
        /* Start copying the split's values to shared memory; they are needed after the
         * scores, so the copy overlaps the key loads and the dot products. */
        for (int i = tid; i < nvalid * (HD / 8); i += ATT_THREADS) {
            int j = i / (HD / 8), c16 = i % (HD / 8);
            const uint16_t *src = AT(page_row)(vc, pg_s[j / PAGE], j % PAGE, kh, n_kv) + 8 * c16;
            uint32_t dst = (uint32_t)__cvta_generic_to_shared(v_s + j * HD + 8 * c16);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
        /* Scores: thread tid owns slot tid; a sequential dot over d, done in two halves of
         * the key row (fewer live registers) with the running sum parked in p_s. */
        {
            int pos = base + tid;
            bool have = tid < nvalid;
#pragma unroll 1
            for (int half = 0; half < 2; half++) {
                uint4 kr[HD / 16];
                if (have) {
                    const uint4 *src = (const uint4 *)AT(page_row)(kc, pg_s[tid / PAGE], tid % PAGE, kh, n_kv);
#pragma unroll
                    for (int i = 0; i < HD / 16; i++) kr[i] = __ldg(src + half * (HD / 16) + i);
                }
                for (int r = 0; r < R; r++) {
                    int tpos = it.pos0 + r / G;
                    float s = -INFINITY;
                    if (have && pos <= tpos) {
                        const float4 *qr = (const float4 *)(q_s + r * HD + half * (HD / 2));
                        s = half ? p_s[r * SPLIT + tid] : 0.0f;
#pragma unroll
                        for (int i = 0; i < HD / 16; i++) {
                            const uint16_t *kk = (const uint16_t *)&kr[i];
                            float4 qa = qr[2 * i], qb = qr[2 * i + 1];
                            s = __fmaf_rn(qa.x, bf(kk[0]), s);
                            s = __fmaf_rn(qa.y, bf(kk[1]), s);
                            s = __fmaf_rn(qa.z, bf(kk[2]), s);
                            s = __fmaf_rn(qa.w, bf(kk[3]), s);
                            s = __fmaf_rn(qb.x, bf(kk[4]), s);
                            s = __fmaf_rn(qb.y, bf(kk[5]), s);
                            s = __fmaf_rn(qb.z, bf(kk[6]), s);
                            s = __fmaf_rn(qb.w, bf(kk[7]), s);
                        }
                    }
                    p_s[r * SPLIT + tid] = s;
                }
            }
        }
        __syncthreads();
        /* Split softmax statistics: warp per row, lane-sequential then a fixed xor tree. */
        for (int r = warp; r < R; r += 8) {
            float *pr = p_s + r * SPLIT;
            float mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < SPLIT / 32; i++) mx = fmaxf(mx, pr[lane + 32 * i]);
            for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            float sum = 0.0f;
            if (mx != -INFINITY) {
#pragma unroll
                for (int i = 0; i < SPLIT / 32; i++) {
                    float p = expf(__fsub_rn(pr[lane + 32 * i], mx));
                    pr[lane + 32 * i] = p;
                    sum = __fadd_rn(sum, p);
                }
            }
            for (int off = 16; off; off >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, off));
            sum = __shfl_sync(0xffffffffu, sum, 0);
            if (lane == 0) {
                mc_s[r] = mx;
                lc_s[r] = sum;
            }
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
        /* o_c = sum_j p_j v_j, j in slot order; slots past nvalid have p == 0 for every row. */
        {
            float oc[8][4];
#pragma unroll
            for (int k = 0; k < 8; k++)
#pragma unroll
                for (int e = 0; e < 4; e++) oc[k][e] = 0.0f;
            /* Rows of this warp: warp, warp+8, ...; the loop is specialised per count so no
             * issue slots go to predicated-off rows (decode has 4 rows in 8 warps). */
            int nk = warp < R ? (R - warp + 7) / 8 : 0;
            switch (nk) {
            case 1: AT(pv_rows)(oc, p_s, v_s, nvalid, warp, lane, 1); break;
            case 2: AT(pv_rows)(oc, p_s, v_s, nvalid, warp, lane, 2); break;
            case 3: AT(pv_rows)(oc, p_s, v_s, nvalid, warp, lane, 3); break;
            case 4: AT(pv_rows)(oc, p_s, v_s, nvalid, warp, lane, 4); break;
            case 5: AT(pv_rows)(oc, p_s, v_s, nvalid, warp, lane, 5); break;
            case 6: AT(pv_rows)(oc, p_s, v_s, nvalid, warp, lane, 6); break;
            case 7: AT(pv_rows)(oc, p_s, v_s, nvalid, warp, lane, 7); break;
            case 8: AT(pv_rows)(oc, p_s, v_s, nvalid, warp, lane, 8); break;
            default: break;
            }
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int r = warp + 8 * k;
                if (r >= R) continue;
                int tpos = it.pos0 + r / G;
                if (tpos < base) continue; /* no key of this row in the split */
                float mc = mc_s[r], lc = lc_s[r];
                if (it.chunk >= 0) {
                    int tok = it.tok0 + r / G, h = kh * G + r % G;
                    float *dst = ws + ((size_t)(tok_pbase[tok] + c) * n_heads + h) * (HD + 4);
                    if (lane == 0) {
                        dst[0] = mc;
                        dst[1] = lc;
                    }
                    if (4 * lane < HD)
                        *(float4 *)(dst + 4 + 4 * lane) = make_float4(oc[k][0], oc[k][1], oc[k][2], oc[k][3]);
                } else {
                    float4 *orow = (float4 *)(o_s + r * HD) + lane;
                    float4 oc4 = make_float4(oc[k][0], oc[k][1], oc[k][2], oc[k][3]);
                    if (c == 0) {
                        if (4 * lane < HD) *orow = oc4;
                        __syncwarp();
                        if (lane == 0) {
                            m_s[r] = mc;
                            l_s[r] = lc;
                        }
                    } else {
                        float mn, a, b;
                        fold_scales(m_s[r], mc, &mn, &a, &b);
                        if (4 * lane < HD) {
                            float4 ov = *orow;
                            ov.x = fold_val(ov.x, oc4.x, a, b);
                            ov.y = fold_val(ov.y, oc4.y, a, b);
                            ov.z = fold_val(ov.z, oc4.z, a, b);
                            ov.w = fold_val(ov.w, oc4.w, a, b);
                            *orow = ov;
                        }
                        float ln = fold_val(l_s[r], lc, a, b);
                        __syncwarp();
                        if (lane == 0) {
                            m_s[r] = mn;
                            l_s[r] = ln;
                        }
                    }
                }
            }
        }
        __syncthreads();
    }
    if (it.chunk >= 0) return;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        int r = warp + 8 * k;
        if (r >= R || 4 * lane >= HD) continue;
        int tok = it.tok0 + r / G, h = kh * G + r % G;
        __nv_bfloat162 *dst = (__nv_bfloat162 *)(out + ((size_t)tok * n_heads + h) * HD + 4 * lane);
        float4 ov = ((const float4 *)(o_s + r * HD))[lane];
        float l = l_s[r];
        dst[0] = __floats2bfloat162_rn(__fdiv_rn(ov.x, l), __fdiv_rn(ov.y, l));
        dst[1] = __floats2bfloat162_rn(__fdiv_rn(ov.z, l), __fdiv_rn(ov.w, l));
    }
}

/* counts == NULL: CTA x runs item x. Otherwise counts = {n_items, max_pages} in device
 * memory and the CTAs stride over the items: the grid stays fixed while the work changes
 * (a replayed CUDA graph). Either way an item is the same instruction sequence. */
__global__ void __launch_bounds__(ATT_THREADS, 2)
AT(attn_kernel)(const invar_cuda_attn_item *__restrict__ items, const uint16_t *__restrict__ q,
            const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
            const int32_t *__restrict__ block_table, const int32_t *__restrict__ ctx_len,
            const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
            float *__restrict__ ws, int n_heads, int n_kv, int max_pages, float scale, int rmax,
            const int32_t *__restrict__ counts)
{
    /* The count and stride are re-read per item rather than held across it: the item body
     * uses every register the two-CTAs-per-SM bound leaves. */
    for (int i = blockIdx.x; i < (counts ? __ldg(counts) : (int)gridDim.x); i += gridDim.x) {
        AT(attn_item_run)(items[i], q, kc, vc, block_table, ctx_len, tok_pbase, out, ws, n_heads, n_kv,
                          counts ? __ldg(counts + 1) : max_pages, scale, rmax);
        __syncthreads(); /* the next item reuses the shared memory */
    }
}

/* Folds a token-head's split partials in split order: one warp per (token, head). */
__global__ void AT(attn_merge_kernel)(const float *__restrict__ ws, const int32_t *__restrict__ tok_pos,
                                  const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
                                  int n_tokens, int n_heads, int reverse)
{
    int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (gw >= n_tokens * n_heads || 4 * lane >= HD) return;
    int tok = gw / n_heads, h = gw % n_heads;
    int nc = tok_pos[tok] / SPLIT + 1;
    float m = 0, l = 0, o[4] = {0, 0, 0, 0};
    for (int k = 0; k < nc; k++) {
        const int c = reverse ? nc - 1 - k : k; /* reverse: negative control only */
        const float *src = ws + ((size_t)(tok_pbase[tok] + c) * n_heads + h) * (HD + 4);
        float mc = src[0], lc = src[1];
        float4 oc = *(const float4 *)(src + 4 + 4 * lane);
        if (k == 0) {
            m = mc;
            l = lc;
            o[0] = oc.x;
            o[1] = oc.y;
            o[2] = oc.z;
            o[3] = oc.w;
        } else {
            float mn, a, b;
            fold_scales(m, mc, &mn, &a, &b);
            m = mn;
            l = fold_val(l, lc, a, b);
            o[0] = fold_val(o[0], oc.x, a, b);
            o[1] = fold_val(o[1], oc.y, a, b);
            o[2] = fold_val(o[2], oc.z, a, b);
            o[3] = fold_val(o[3], oc.w, a, b);
        }
    }
    __nv_bfloat162 *dst = (__nv_bfloat162 *)(out + ((size_t)tok * n_heads + h) * HD + 4 * lane);
    dst[0] = __floats2bfloat162_rn(__fdiv_rn(o[0], l), __fdiv_rn(o[1], l));
    dst[1] = __floats2bfloat162_rn(__fdiv_rn(o[2], l), __fdiv_rn(o[3], l));
}

__global__ void AT(kv_write_kernel)(const uint16_t *__restrict__ k, const uint16_t *__restrict__ v,
                                uint16_t *__restrict__ kc, uint16_t *__restrict__ vc,
                                const int32_t *__restrict__ slot, int n_kv, size_t nvec)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nvec) return;
    int per_tok = n_kv * HD / 8;
    size_t t = i / per_tok;
    int r = (int)(i % per_tok);
    int kh = r / (HD / 8), dv = r % (HD / 8);
    int s = slot[t];
    size_t dst = (((size_t)(s / PAGE) * n_kv + kh) * PAGE + s % PAGE) * HD / 8 + dv;
    ((uint4 *)kc)[dst] = ((const uint4 *)k)[i];
    ((uint4 *)vc)[dst] = ((const uint4 *)v)[i];
}

