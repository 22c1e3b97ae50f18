/* Thin wrappers over the sm_90 PTX the GEMM needs: mbarriers, TMA tile loads, wgmma
 * fences, register reallocation and named barriers (the attention kernels use them too). */
#ifndef INVAR_HOPPER_PTX_CUH
#define INVAR_HOPPER_PTX_CUH
#include <stdint.h>

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void mbar_fence_init(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

static __device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* Waits until the phase with the given parity has completed. */
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n"
                     ".reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n"
                     "}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

/* 2-D TMA tile load: box at (x = inner coordinate, y = outer) into smem, completing on bar. */
static __device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *tmap, int x, int y,
                                                   uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"((uint64_t)tmap), "r"(x), "r"(y), "r"(bar)
                 : "memory");
}

/* The same load written into the same offset of every CTA in `mask` (cluster ranks); each
 * destination CTA's mbarrier at offset `bar` receives the bytes. */
static __device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const void *tmap, int x,
                                                             int y, uint32_t bar, uint16_t mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
                 "l"((uint64_t)tmap), "r"(x), "r"(y), "r"(bar), "h"(mask)
                 : "memory");
}

static __device__ __forceinline__ uint32_t cluster_ctarank(void)
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

/* Arrives on the mbarrier at the same offset in cluster CTA `rank`. */
static __device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank)
{
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
    /* No .release.cluster: the consumer has only read the stage (its wgmmas completed), so
     * there are no writes to order, and the cluster-scope fence would stall every arrive. */
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

static __device__ __forceinline__ void cluster_sync(void)
{
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

static __device__ __forceinline__ void tma_prefetch_desc(const void *tmap)
{
    asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)tmap) : "memory");
}

static __device__ __forceinline__ void wgmma_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void wgmma_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void wgmma_wait0(void)
{
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
static __device__ __forceinline__ void wgmma_wait1(void)
{
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
}
/* Waits until at most N committed wgmma groups are still in flight. */
template <int N>
static __device__ __forceinline__ void wgmma_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* Shared-memory matrix descriptor for a K-major tile written by TMA with 128-byte swizzle:
 * rows of 128 bytes, 8-row groups 1024 bytes apart; the tile base is 1024-byte aligned and a
 * k16 step inside the 64-wide K-tile adds 32 bytes to the start address. */
static __device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t addr)
{
    uint64_t d = 0;
    d |= (uint64_t)((addr & 0x3FFFF) >> 4);
    d |= (uint64_t)(16 >> 4) << 16;      /* leading byte offset (unused for swizzled K-major) */
    d |= (uint64_t)(1024 >> 4) << 32;    /* stride byte offset: next 8-row group */
    d |= (uint64_t)1 << 62;              /* 128-byte swizzle */
    return d;
}

/* The same for an MN-major operand (its N index contiguous: V stored [key][dim] as the B of
 * P V, with imm-trans-b = 1): 128-byte rows along K (keys), 8-row groups 1024 bytes apart, a
 * k16 step adds 2048 bytes. One byte offset steps over the 8-row groups in K and the other
 * over 64-element swizzle atoms in N; an N = 64 instruction spans one atom and never uses the
 * latter, so both are 1024 and the descriptor does not depend on which field is which. */
static __device__ __forceinline__ uint64_t smem_desc_sw128_mn(uint32_t addr)
{
    uint64_t d = 0;
    d |= (uint64_t)((addr & 0x3FFFF) >> 4);
    d |= (uint64_t)(1024 >> 4) << 16;
    d |= (uint64_t)(1024 >> 4) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}

/* The same for an MN-major operand two swizzle atoms wide in N (V of head_dim 128 as the B of
 * an N = 128 instruction): the leading byte offset steps from the atom of N = 0..63 to that of
 * 64..127, 8192 bytes on (the tile's second 64-column sub-tile); the stride byte offset over
 * 8-row groups in K, 1024. */
static __device__ __forceinline__ uint64_t smem_desc_sw128_mn2(uint32_t addr)
{
    uint64_t d = 0;
    d |= (uint64_t)((addr & 0x3FFFF) >> 4);
    d |= (uint64_t)(8192 >> 4) << 16;
    d |= (uint64_t)(1024 >> 4) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}

/* Orders this thread's generic-proxy shared-memory writes (st.shared, completed cp.async)
 * before later async-proxy reads (wgmma operands) once a barrier publishes them. */
static __device__ __forceinline__ void fence_proxy_async(void)
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

#define SETMAXNREG_DEC(n) asm volatile("setmaxnreg.dec.sync.aligned.u32 " #n ";" ::: "memory")
#define SETMAXNREG_INC(n) asm volatile("setmaxnreg.inc.sync.aligned.u32 " #n ";" ::: "memory")

static __device__ __forceinline__ void named_barrier(int id, int nthreads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

/* Counts this thread's warp towards named barrier `id` without waiting (the producer side of
 * a hand-over: the threads that bar.sync on it wait for these arrivals). */
static __device__ __forceinline__ void named_barrier_arrive(int id, int nthreads)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

#endif
