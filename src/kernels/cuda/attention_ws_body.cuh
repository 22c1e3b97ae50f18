/* The warp-specialised wgmma attention kernel for items of more than 64 rows (prefill), for
 * one head_dim (included by attention.cu after attention_wgmma_body.cuh, whose per-block
 * functions it runs: the same per-row arithmetic as wg_attn_kernel, so prefill and decode
 * stay bitwise equal).
 *
 * Roles (128 (NWG + 1) threads): warpgroups 0 .. NWG-1 consume (64 query rows each, as in
 * wg_attn_kernel; a warpgroup without rows in an item, as warpgroup 1 in decode, only passes
 * its stages on); warp 0 of warpgroup NWG produces. NWG = 1 (decode: items of at most 64
 * rows) leaves room for a deeper ring. The producer walks the same items and KV blocks and fills
 * an ST-stage ring: a page of one KV head is 16 contiguous cache rows, so a block is four
 * pages, each loaded by TMA as HD/64 boxes of 16 rows x 128 bytes (128-byte swizzle: the
 * layout wsw describes) that complete on the stage's `full` mbarrier. A page that holds the
 * end of the keys (kend) is copied by the warp's lanes instead, rows past kend written as
 * zeros (the cache may hold anything there, and P = 0 must meet a finite V), as are pages
 * wholly past it; those lanes fence their generic-proxy writes before the arrive. Each
 * consumer warp releases a stage on its `empty` mbarrier once its wgmmas that read it have
 * completed. No CTA-wide barrier after the set-up: the two warpgroups drift apart.
 *
 * A consumer turn issues P V of the previous block and S of this one; P V of block j is
 * issued in turn j + 1 (or after the last block): the operations on O are the same, in the
 * same order, as issuing it right after the softmax of j. The split that a block ends is
 * written out or folded once that block's P V has completed. PP (ping-pong, off by default:
 * 2-3% slower once each warpgroup overlaps its own softmax): the consumer warpgroups take turns (named barriers 1 and 2, warpgroup 0 first), so one warpgroup's
 * softmax runs while the other's products keep the tensor cores busy. Within a warpgroup, S is
 * issued before P V, and the softmax starts when S is done, under that P V; O's rescale waits
 * for it (after a split's last block, the plain order). PV128: see wg_issue_pv. */
template <int NWG, int ST, bool PP, bool PV128>
__global__ void __launch_bounds__(128 * (NWG + 1), 1)
AT(ws_attn_kernel)(const __grid_constant__ CUtensorMap tmk, const __grid_constant__ CUtensorMap tmv,
            const invar_cuda_attn_item *__restrict__ items, int n_items, const uint16_t *__restrict__ q,
            const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
            const int32_t *__restrict__ block_table, const int32_t *__restrict__ ctx_len,
            const int32_t *__restrict__ tok_pbase, uint16_t *__restrict__ out,
            float *__restrict__ ws, int n_heads, int n_kv, int max_pages, float scale,
            const int32_t *__restrict__ counts, int fold_ctl)
{
    constexpr int NT = 128 * NWG, MR = 64 * NWG;
    static_assert(ST >= 2, "one stage filled while one is read");
    static_assert(NWG == 2 || (NWG == 1 && !PP), "turns take two consumer warpgroups");
    constexpr uint32_t KV_TILE = KB * HD * 2, PAGE_BYTES = PAGE * HD * 2;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw), q_s = (raw + 1023u) & ~1023u; /* host adds 1 KB slack */
    const uint32_t k_s = q_s + MR * HD * 2, v_s = k_s + ST * KV_TILE;
    float4 *orun = (float4 *)(smem_raw + (q_s - raw) + MR * HD * 2 + 2 * ST * KV_TILE) + threadIdx.x;
    const uint32_t full0 = q_s + MR * HD * 2 + 2 * ST * KV_TILE + NT * (HD / 2) * 4, empty0 = full0 + 8 * ST;
    /* The warpgroup index through a shuffle: warp-uniform to the compiler too (descriptors
     * built from it live in uniform registers). */
    const int kh = blockIdx.y, tid = threadIdx.x, lane = tid & 31, wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    if (tid == 0) {
        for (int s = 0; s < ST; s++) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 4 * NWG); /* one arrive per consumer warp */
        }
        mbar_fence_init();
        tma_prefetch_desc(&tmk);
        tma_prefetch_desc(&tmv);
    }
    __syncthreads();
    /* counts == NULL: n_items items, CTA x runs x, x + grid, ... counted from the last (the
     * longest come first). Else counts = {n_items, max_pages} on the device (graphs). */
    const int ni = counts ? __ldg(counts) : n_items;
    const int mp = counts ? __ldg(counts + 1) : max_pages;
#define ITEM(k) items[counts ? (k) : ni - 1 - (k)]

    if (wg == NWG) {
        /* ---- producer ---- */
        if constexpr (NWG == 2) SETMAXNREG_DEC(40); /* one consumer warpgroup has registers to spare */
        if (tid - 128 * NWG >= 32) return; /* warps 1-3 of the warpgroup have nothing to do */
        uint32_t n = 0;
        for (int k = blockIdx.x; k < ni; k += gridDim.x) {
            const invar_cuda_attn_item it = ITEM(k);
            const int32_t *bt = block_table + (size_t)it.seq * mp;
            int kb0, kb1, kend;
            AT(wg_blocks)(it, ctx_len[it.seq], &kb0, &kb1, &kend);
            for (int kb = kb0; kb < kb1; kb++, n++) {
                const uint32_t s = n % ST, ph = (n / ST) & 1u;
                const uint32_t kbuf = k_s + s * KV_TILE, vbuf = v_s + s * KV_TILE, fb = full0 + 8 * s;
                const int kbase = kb * KB;
                const int pl = lane < KB / PAGE && kbase + lane * PAGE < kend ? __ldg(bt + kbase / PAGE + lane) : 0;
                int pg[KB / PAGE];
#pragma unroll
                for (int p = 0; p < KB / PAGE; p++) pg[p] = __shfl_sync(0xffffffffu, pl, p);
                mbar_wait(empty0 + 8 * s, ph ^ 1u);
                uint32_t tx = 0;
#pragma unroll
                for (int p = 0; p < KB / PAGE; p++) {
                    const int start = kbase + p * PAGE;
                    if (start + PAGE <= kend) {
                        tx += 2 * PAGE_BYTES;
                        continue;
                    }
                    /* The page with the end of the keys, or one past it: by the lanes. */
                    for (int i = lane; i < PAGE * WCH; i += 32) {
                        const int r = i / WCH, ch = i % WCH;
                        const uint32_t off = AT(wsw)(p * PAGE + r, ch);
                        if (start + r < kend) {
                            const size_t e = (((size_t)pg[p] * n_kv + kh) * PAGE + r) * HD + 8 * ch;
                            st_shared16(kbuf + off, __ldg((const uint4 *)(kc + e)));
                            st_shared16(vbuf + off, __ldg((const uint4 *)(vc + e)));
                        } else {
                            st_shared_zero16(kbuf + off);
                            st_shared_zero16(vbuf + off);
                        }
                    }
                }
                fence_proxy_async(); /* the lanes' writes, before the consumers' wgmma reads */
                __syncwarp();
                if (lane == 0) {
                    mbar_arrive_expect_tx(fb, tx);
#pragma unroll
                    for (int p = 0; p < KB / PAGE; p++) {
                        if (kbase + p * PAGE + PAGE > kend) continue;
                        const int y = (pg[p] * n_kv + kh) * PAGE;
#pragma unroll
                        for (int hh = 0; hh < HD / 64; hh++) {
                            tma_load_2d(kbuf + hh * 8192 + p * PAGE * 128, &tmk, 64 * hh, y, fb);
                            tma_load_2d(vbuf + hh * 8192 + p * PAGE * 128, &tmv, 64 * hh, y, fb);
                        }
                    }
                }
                __syncwarp();
            }
        }
        return;
    }

    /* ---- consumers ---- */
    if constexpr (NWG == 2) SETMAXNREG_INC(232);
    /* wwarp through a shuffle, as wg: warp-uniform to the compiler, so that the branches on
     * rw.wreal keep the loop's descriptors in uniform registers */
    const int wwarp = __shfl_sync(0xffffffffu, (tid >> 5) & 3, 0), tig = lane & 3, G = n_heads / n_kv;
    const float sl2 = __fmul_rn(scale, 1.44269504088896341f);
    const uint32_t qa = q_s + (uint32_t)wg * (64 * HD * 2);
    const int turn_mine = 1 + wg, turn_other = 2 - wg;
    if (PP && wg == 1) named_barrier_arrive(1, NT); /* warpgroup 0 takes the first turn */
    uint32_t n = 0;
    for (int k = blockIdx.x; k < ni; k += gridDim.x) {
        const invar_cuda_attn_item it = ITEM(k);
        const int R = it.ntok * G;
        int kb0, kb1, kend;
        AT(wg_blocks)(it, ctx_len[it.seq], &kb0, &kb1, &kend);
        if (!PP && 64 * wg >= R) {
            /* A warpgroup without rows (decode: 4 of 64 rows, all in warpgroup 0) computes and
             * writes nothing for the item, so it only passes each stage on once it is full
             * (waiting for full keeps its releases in the stage's current phase). */
            for (int kb = kb0; kb < kb1; kb++, n++) {
                mbar_wait(full0 + 8 * (n % ST), (n / ST) & 1u);
                __syncwarp();
                if (lane == 0) mbar_arrive(empty0 + 8 * (n % ST));
            }
            continue;
        }
        /* This warpgroup's Q rows (its previous item's wgmmas have completed). */
        named_barrier(3 + wg, 128);
        AT(wload_q)<128>(q_s, it, q, 64 * wg, 64, tid & 127, R, G, kh, n_heads);
        cp_async_commit();
        cp_async_wait0();
        fence_proxy_async();
        named_barrier(3 + wg, 128);
        const AT(wg_rows) rw = AT(wg_rows_of)(it, R, G, wg, wwarp, lane);
        AT(wg_state) st;
        AT(wg_fresh)(st);
        st.mrun[0] = st.mrun[1] = st.lrun[0] = st.lrun[1] = 0.0f;
        /* Every turn issues the same wgmma sequence (ptxas serialises wgmmas issued under
         * conditions it cannot prove warpgroup-uniform): P V of the previous block, then S of
         * this one. Before the first block, and for a block past the warpgroup's rows, P is
         * 0: adding P V = 0 (V finite: cached values, or the producer's zeros) leaves O's bits
         * unchanged (O is never -0), and such a block's S is not used. */
        uint32_t pa[KB / 16][4];
        AT(wg_zero_p)(pa);
        uint32_t prev_s = 0;
        bool prev_end = false;
        for (int kb = kb0; kb < kb1; kb++, n++) {
            const uint32_t s = n % ST, ph = (n / ST) & 1u;
            const int kbase = kb * KB;
            float sacc[KB / 2];
            mbar_wait(full0 + 8 * s, ph);
            if (PP) named_barrier(turn_mine, NT);
            fence_regs<HD / 2>(st.o);
            fence_regs_u<KB / 4>(&pa[0][0]);
            wgmma_fence();
            AT(wg_issue_s)(sacc, qa, k_s + s * KV_TILE);
            wgmma_commit();
            AT(wg_issue_pv)<PV128>(st.o, pa, v_s + (kb == kb0 ? s : prev_s) * KV_TILE);
            wgmma_commit();
            if (PP) named_barrier_arrive(turn_other, NT);
            const bool act = rw.wactive && kbase <= rw.wlast; /* warpgroup-uniform */
            if (!(kb > kb0 && prev_end)) {
                /* S is done once one group is left (groups complete in order): the weights
                 * of this block are computed while P V of the previous one is still on the
                 * tensor cores; P is packed (its registers are that P V's operand) and O
                 * rescaled once that P V is in. */
                wgmma_wait1();
                fence_regs<KB / 2>(sacc);
                float vv[2][KB / 4], alpha[2];
                const bool w = act && AT(wg_softmax_w)(sacc, st, rw, kbase, sl2, tig, vv, alpha);
                wgmma_wait0();
                fence_regs<HD / 2>(st.o);
                fence_regs_u<KB / 4>(&pa[0][0]);
                if (kb > kb0) {
                    __syncwarp();
                    if (lane == 0) mbar_arrive(empty0 + 8 * prev_s);
                }
                if (w) {
                    AT(wg_rescale)(st.o, alpha);
                    AT(wg_pack_p)(vv, pa);
                } else {
                    AT(wg_zero_p)(pa);
                }
            } else {
                /* (The previous block ended a split: its state goes out before this block
                 * starts the next split's.) */
                wgmma_wait0();
                fence_regs<KB / 2>(sacc);
                fence_regs<HD / 2>(st.o);
                if (kb > kb0) {
                    __syncwarp();
                    if (lane == 0) mbar_arrive(empty0 + 8 * prev_s);
                    if (prev_end)
                        AT(wg_split_end)<true, NT>(kb - 1, it, st, rw, orun, ws, tok_pbase, n_heads, kh, G, tig, fold_ctl);
                }
                if (act) AT(wg_softmax)(sacc, st, rw, kbase, sl2, tig, pa);
                else AT(wg_zero_p)(pa);
            }
            prev_s = s;
            prev_end = AT(wg_split_ends)(kb, kb1);
        }
        if (kb0 < kb1) { /* the last block's P V, outside the turns (every item has a block) */
            fence_regs<HD / 2>(st.o);
            fence_regs_u<KB / 4>(&pa[0][0]);
            wgmma_fence();
            AT(wg_issue_pv)<PV128>(st.o, pa, v_s + prev_s * KV_TILE);
            wgmma_commit();
            wgmma_wait0();
            fence_regs<HD / 2>(st.o);
            __syncwarp();
            if (lane == 0) mbar_arrive(empty0 + 8 * prev_s);
            if (prev_end)
                AT(wg_split_end)<true, NT>(kb1 - 1, it, st, rw, orun, ws, tok_pbase, n_heads, kh, G, tig, fold_ctl);
        }
        if (it.chunk < 0) AT(wg_write_out)<NT>(it, st, rw, orun, out, n_heads, kh, G, tig);
    }
    if (PP && wg == 0) named_barrier(1, NT); /* warpgroup 1's last hand-over */
#undef ITEM
}

#undef WCH
