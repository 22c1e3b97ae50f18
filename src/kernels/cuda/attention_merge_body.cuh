/* Per-head_dim kernels shared by both attention items (included by attention.cu with HD and
 * AT(name) defined): the in-order merge of split partials and the KV-cache write. */
/* Folds a token-head's nc split partials (base: split 0's, stride: one split's) in split
 * order and writes the normalised bf16 row to dst: one warp, lane l the NPL dims d0 + l + 32 i
 * (NPL = 1: a warp per 32 dims; NPL = HD / 32: a warp per row). Every dim runs the same
 * operations on the same values whichever warp holds it, so NPL changes no bit. The partials
 * are read AHEAD at a time before they are folded (the fold order is unchanged): a lone
 * sequence at 32k has 64 splits, and one dependent global load per split made the merge most
 * of its decode time. Loads go through L2 (ld.cg): the attention kernel's own last CTA of a
 * tile runs this on partials other CTAs of the same launch wrote (L1 is not coherent), the
 * merge kernel on those of the launch before; same values, same bits. */
template <int NPL>
static __device__ __forceinline__ void AT(merge_row)(const float *base, size_t stride, int nc, int reverse, int lane,
                                                     int d0, uint16_t *dst)
{
    constexpr int AHEAD = NPL == 1 ? 32 : 16; /* about 100 registers of partials in flight */
    float m = 0, l = 0, o[NPL];
    for (int k0 = 0; k0 < nc; k0 += AHEAD) {
        float mc[AHEAD], lc[AHEAD], oc[AHEAD][NPL];
#pragma unroll
        for (int u = 0; u < AHEAD; u++) {
            if (k0 + u >= nc) break;
            const int c = reverse ? nc - 1 - (k0 + u) : k0 + u; /* reverse: negative control only */
            const float *src = base + (size_t)c * stride;
            mc[u] = __ldcg(src);
            lc[u] = __ldcg(src + 1);
#pragma unroll
            for (int i = 0; i < NPL; i++) oc[u][i] = __ldcg(src + 4 + d0 + lane + 32 * i);
        }
#pragma unroll
        for (int u = 0; u < AHEAD; u++) {
            if (k0 + u >= nc) break;
            if (k0 + u == 0) {
                m = mc[u];
                l = lc[u];
#pragma unroll
                for (int i = 0; i < NPL; i++) o[i] = oc[u][i];
            } else {
                float mn, a, b;
                fold_scales(m, mc[u], &mn, &a, &b);
                m = mn;
                l = fold_val(l, lc[u], a, b);
#pragma unroll
                for (int i = 0; i < NPL; i++) o[i] = fold_val(o[i], oc[u][i], a, b);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < NPL; i++) {
        __nv_bfloat16 v = __float2bfloat16_rn(__fdiv_rn(o[i], l));
        dst[d0 + lane + 32 * i] = *(uint16_t *)&v;
    }
}

/* The merge kernel: one warp per NPL x 32 dims of a (token, head) of the launch. A launch of
 * few rows takes a warp per 32 dims (NPL = 1: a lone long sequence's 32 rows on 128 warps,
 * not 4 SMs), one of many rows a warp per row (NPL = HD / 32: its partials read once). */
template <int NPL>
__global__ void AT(attn_merge_kernel)(const float *__restrict__ ws, const int32_t *__restrict__ tok_pos,
                                  const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
                                  int n_tokens, int n_heads, int reverse)
{
    constexpr int WPR = HD / 32 / NPL; /* warps per row */
    const int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (gw >= n_tokens * n_heads * WPR) return;
    const int row = gw / WPR, d0 = 32 * NPL * (gw % WPR);
    const int tok = row / n_heads, h = row % n_heads;
    AT(merge_row)<NPL>(ws + ((size_t)tok_pbase[tok] * n_heads + h) * (HD + 4), (size_t)n_heads * (HD + 4),
                       tok_pos[tok] / SPLIT + 1, reverse, lane, d0, out + ((size_t)tok * n_heads + h) * HD);
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

