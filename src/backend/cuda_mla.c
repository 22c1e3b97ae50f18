/* deepseek2's multi-head latent attention on the GPU, in the CPU's one formulation for every
 * row (model/mla.h): absorbed queries against the latent cache (kernels/cuda/mla.cu).
 *   x -> [q | q_a ; c_kv, k_pe]   one invariant GEMM (fp32 out) over the stacked weights
 *   latent                        c_kv normed, k_pe rope'd, both into the cache row of the
 *                                 token's position; q_a normed (q_lora > 0)
 *   q                             q_a -> q (q_lora > 0: the invariant GEMM)
 *   absorb                        q_nope head-major (row h T + t), q_c = W_UK q_nope per head as one
 *                                 grouped invariant GEMM over the heads; q_pe rope'd
 *   attention                     latent rows 0..pos on tensor cores, splits at fixed absolute positions
 *                                 (graphs: the block-table stride from the staging buffer)
 *   output                        W_UV o_lat per head (the grouped GEMM), heads side by side for
 *                                 attn_output
 * A head's GEMM rows carry invar_cuda_gemm's bits for that row whatever T is, so no value
 * depends on the other tokens of the forward. */
#ifdef INVAR_HAVE_CUDA
#include "backend/cuda_backend.h"

int cuda_mla_attention(cuda_backend *c, invar_cuda_ctx *ctx, backend_kv *kv, int64_t il, int64_t T,
                       const step_arrays *dev, const invar_cuda_attn_launch *attn) {
    const model_config *cf = &c->base.m->cfg;
    const cuda_layer *L = &c->w.layers[il];
    const cuda_bufs *d = &c->d;
    const int64_t H = cf->n_head, R = c->mla_R, rope = c->mla_rope, nope = c->mla_nope, ql = c->mla_ql;
    const int64_t Nq = c->mla_nq, lda = Nq + R + rope, qk = nope + rope, Dk = R + rope;
    uint16_t *cache = kv->k + (size_t)il * (size_t)kv->n_alloc * INVAR_CUDA_PAGE * (size_t)Dk;
    if (cuda_gemm(c, ctx, d->xn, L->mla_a, d->qkv, INVAR_CUDA_F32, T, lda, c->D) ||
        invar_cuda_mla_latent(ctx, d->qkv, (int)lda, (int)ql, L->q_a_norm, d->qa, (int)Nq, (int)R, (int)rope,
                              L->kv_a_norm, cf->rms_eps, c->w.rope_cs, dev->pos, cf->rope_neox, cache, dev->slot,
                              (int)T))
        return -1;
    const float *q = d->qkv;
    int64_t ldq = lda;
    if (ql) {
        if (cuda_gemm(c, ctx, d->qa, L->mla_qb, d->mq, INVAR_CUDA_F32, T, H * qk, ql)) return -1;
        q = d->mq;
        ldq = H * qk;
    }
    /* The per-head work list depends on T alone: made once per forward (every deepseek2 layer
     * is MLA, so layer 0 makes it). */
    const int bm = T >= 256 ? 128 : 64, max_entries = invar_cuda_mla_heads_max_entries((int)H, (int)T, bm);
    if (il == 0 && invar_cuda_mla_heads_plan(ctx, (int)H, (int)T, bm, d->mla_entries, d->mla_n_entries)) return -1;
    /* The negative control moves the split boundaries with the forward's token count. */
    const int split = c->mla_split_by_batch ? 64 * (1 + (int)(T % 3)) : INVAR_CUDA_MLA_KV_SPLIT; /* multiples of 64 */
    const int rows = (int)(H * T);
    /* Few tokens: every token's splits over several CTAs (the same bits, mla_attention.cu);
     * not under the control, whose smaller splits the workspace is not sized for. */
    const int64_t groups = T * ((H + 15) / 16), sm = invar_cuda_sm_count(ctx);
    invar_cuda_mla_parts par = {1, d->mla_ws, (int)c->mla_ws_splits};
    if (T <= c->mla_parts_tmax && !c->mla_split_by_batch && 2 * groups <= sm)
        par.parts = (int)(sm / groups > 128 ? 128 : sm / groups);
    if (invar_cuda_mla_query_prep(ctx, q, (int)ldq, (int)H, (int)nope, (int)rope, c->w.rope_cs, dev->pos,
                                  cf->rope_neox, d->qn, d->qpe, (int)T) ||
        cuda_gemm_grouped(c, ctx, d->qn, L->mla_uk, d->qc, INVAR_CUDA_BF16, T, rows, R, nope, (int)H, d->mla_entries,
                          d->mla_n_entries, max_entries, bm) ||
        /* A graph's launch reads the block-table stride from its staging buffer (counts[1]). */
        (attn->counts ? invar_cuda_mla_attention_dev(ctx, d->qc, d->qpe, cache, dev->pos, dev->tok_seq, dev->btab,
                                                     attn->counts + 1, d->olat, (int)T, (int)H, (int)R, (int)rope,
                                                     cf->attn_scale, split, &par)
                      : invar_cuda_mla_attention(ctx, d->qc, d->qpe, cache, dev->pos, dev->tok_seq, dev->btab,
                                                 attn->max_pages, d->olat, (int)T, (int)H, (int)R, (int)rope,
                                                 cf->attn_scale, split, &par)) ||
        cuda_gemm_grouped(c, ctx, d->olat, L->mla_uv, d->ov, INVAR_CUDA_BF16, T, rows, c->mla_vd, R, (int)H,
                          d->mla_entries, d->mla_n_entries, max_entries, bm) ||
        invar_cuda_mla_heads_to_tokens(ctx, d->ov, (int)H, (int)T, (int)c->mla_vd, d->attn))
        return -1;
    return 0;
}
#endif
