/* What happens to a token's q, k and v between the fused QKV GEMM and attention: bias
 * (Qwen2), per-head RMSNorm (Qwen3 QK-norm), RoPE from the model's own cos/sin table (either
 * GGUF pair layout), q to its buffer and k, v into their KV-cache slots, rounded to bf16.
 *
 * One CTA per token, one warp per head (q heads, then k heads, then v heads). Every value a
 * head produces depends only on that head's inputs and the token's position, through one
 * fixed sequence of operations (the norm's sum: lane-sequential, then a fixed xor tree whose
 * lane 0 result is used), so nothing depends on the batch. */
#include <cuda_bf16.h>
#include <math.h>
#include "kernels/cuda/cuda_internal.h"

#define PREP_WARPS 8
#define PREP_HD_MAX 128

static __device__ __forceinline__ uint16_t to_bf16(float f)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__global__ void __launch_bounds__(PREP_WARPS * 32)
qkv_prep_kernel(const float *__restrict__ qkv, const float *__restrict__ bias,
                const float *__restrict__ q_norm, const float *__restrict__ k_norm, float eps,
                const float *__restrict__ rope_cs, const int32_t *__restrict__ pos, int n_rot, int neox,
                uint16_t *__restrict__ q_out, uint16_t *__restrict__ k_cache, uint16_t *__restrict__ v_cache,
                const int32_t *__restrict__ slot, int H, int Hkv, int hd)
{
    __shared__ float buf[PREP_WARPS][PREP_HD_MAX];
    const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int width = (H + 2 * Hkv) * hd;
    const int p = pos[t], s = slot[t];
    const int page = s / INVAR_CUDA_PAGE, off = s % INVAR_CUDA_PAGE;
    float *x = buf[warp];
    for (int h = warp; h < H + 2 * Hkv; h += PREP_WARPS) {
        const int kind = h < H ? 0 : (h < H + Hkv ? 1 : 2); /* q, k, v */
        const float *src = qkv + (size_t)t * width + (size_t)h * hd;
        for (int d = lane; d < hd; d += 32) {
            float v = src[d];
            if (bias) v = __fadd_rn(v, bias[h * hd + d]);
            x[d] = v;
        }
        __syncwarp();
        const float *nw = kind == 0 ? q_norm : (kind == 1 ? k_norm : NULL);
        if (nw) {
            float ss = 0.0f;
            for (int d = lane; d < hd; d += 32) ss = __fmaf_rn(x[d], x[d], ss);
            for (int o = 16; o; o >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
            ss = __shfl_sync(0xffffffffu, ss, 0);
            float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)hd), eps)));
            __syncwarp();
            for (int d = lane; d < hd; d += 32) x[d] = __fmul_rn(__fmul_rn(x[d], scale), nw[d]);
            __syncwarp();
        }
        if (kind < 2) {
            const int half = n_rot / 2;
            const float *cs = rope_cs + (size_t)p * n_rot;
            for (int i = lane; i < half; i += 32) {
                float c = cs[2 * i], sn = cs[2 * i + 1];
                int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                float x0 = x[a], x1 = x[b];
                x[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
                x[b] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
            }
            __syncwarp();
        }
        uint16_t *dst;
        if (kind == 0) dst = q_out + ((size_t)t * H + h) * hd;
        else dst = (kind == 1 ? k_cache : v_cache) +
                   (((size_t)page * Hkv + (kind == 1 ? h - H : h - H - Hkv)) * INVAR_CUDA_PAGE + off) * hd;
        for (int d = lane; d < hd; d += 32) dst[d] = to_bf16(x[d]);
        __syncwarp();
    }
}

extern "C" int invar_cuda_qkv_prep(invar_cuda_ctx *ctx, const float *qkv, int T, int n_heads, int n_kv_heads,
                                   int head_dim, const float *bias, const float *q_norm, const float *k_norm,
                                   float eps, const float *rope_cs, const int32_t *pos, int n_rot, int neox,
                                   uint16_t *q_out, uint16_t *k_cache, uint16_t *v_cache, const int32_t *slot)
{
    if (T < 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || head_dim > PREP_HD_MAX || n_rot < 0 ||
        n_rot > head_dim || n_rot % 2)
        return invar_cuda_fail(ctx, INVAR_CUDA_EARG, "qkv_prep: bad shape (head_dim %d, n_rot %d)", head_dim, n_rot);
    if (T == 0) return 0;
    qkv_prep_kernel<<<T, PREP_WARPS * 32, 0, ctx->stream>>>(qkv, bias, q_norm, k_norm, eps, rope_cs, pos, n_rot,
                                                            neox, q_out, k_cache, v_cache, slot, n_heads,
                                                            n_kv_heads, head_dim);
    return invar_cuda_check(ctx, cudaGetLastError(), "qkv_prep launch");
}
