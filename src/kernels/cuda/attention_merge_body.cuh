/* Per-head_dim kernels shared by both attention items (included by attention.cu with HD and
 * AT(name) defined): the in-order merge of split partials and the KV-cache write. */
/* Folds a token-head's nc split partials (base: split 0's, stride: one split's) in split
 * order and writes the normalised bf16 row to dst; one warp, each lane 2 dims per 64. The
 * partials are read MERGE_AHEAD at a time before they are folded (the fold order is
 * unchanged): a lone sequence at 32k has 128 splits, and one dependent global load per split
 * made the merge most of its decode time. Loads go through L2 (ld.cg): the attention kernel's
 * own last CTA of a tile runs this on partials other CTAs of the same launch wrote (L1 is not
 * coherent), the merge kernel on those of the launch before; same values, same bits. */
#ifndef MERGE_AHEAD
#define MERGE_AHEAD 16
#endif
static __device__ __forceinline__ void AT(merge_row)(const float *base, size_t stride, int nc, int reverse, int lane,
                                                     uint16_t *dst)
{
    float m = 0, l = 0, o[HD / 32];
    for (int k0 = 0; k0 < nc; k0 += MERGE_AHEAD) {
        float mc[MERGE_AHEAD], lc[MERGE_AHEAD], oc[MERGE_AHEAD][HD / 32];
#pragma unroll
        for (int u = 0; u < MERGE_AHEAD; u++) {
            if (k0 + u >= nc) break;
            const int c = reverse ? nc - 1 - (k0 + u) : k0 + u; /* reverse: negative control only */
            const float *src = base + (size_t)c * stride;
            mc[u] = __ldcg(src);
            lc[u] = __ldcg(src + 1);
#pragma unroll
            for (int i = 0; i < HD / 32; i++) oc[u][i] = __ldcg(src + 4 + lane + 32 * i);
        }
#pragma unroll
        for (int u = 0; u < MERGE_AHEAD; u++) {
            if (k0 + u >= nc) break;
            if (k0 + u == 0) {
                m = mc[u];
                l = lc[u];
#pragma unroll
                for (int i = 0; i < HD / 32; i++) o[i] = oc[u][i];
            } else {
                float mn, a, b;
                fold_scales(m, mc[u], &mn, &a, &b);
                m = mn;
                l = fold_val(l, lc[u], a, b);
#pragma unroll
                for (int i = 0; i < HD / 32; i++) o[i] = fold_val(o[i], oc[u][i], a, b);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < HD / 32; i++) {
        __nv_bfloat16 v = __float2bfloat16_rn(__fdiv_rn(o[i], l));
        dst[lane + 32 * i] = *(uint16_t *)&v;
    }
}

/* The merge kernel: one warp per (token, head) of the launch. */
__global__ void AT(attn_merge_kernel)(const float *__restrict__ ws, const int32_t *__restrict__ tok_pos,
                                  const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
                                  int n_tokens, int n_heads, int reverse)
{
    int gw = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (gw >= n_tokens * n_heads) return;
    int tok = gw / n_heads, h = gw % n_heads;
    AT(merge_row)(ws + ((size_t)tok_pbase[tok] * n_heads + h) * (HD + 4), (size_t)n_heads * (HD + 4),
                  tok_pos[tok] / SPLIT + 1, reverse, lane, out + ((size_t)tok * n_heads + h) * HD);
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

