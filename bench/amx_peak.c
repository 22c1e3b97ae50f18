/* AMX-INT8 throughput probe for bench/cpu_bench.py, beside int8_peak.c's vpdpbusd rate, on
 * hosts that expose AMX (cpuinfo flags amx_tile, amx_int8). invar's matmuls do not use AMX
 * yet: this bounds what an AMX prefill could reach.
 *
 * usage: amx_peak THREADS REPS   (build: cc -O3 -march=native on an AMX host)
 * Per thread four independent tdpbssd chains on 16 x 64-byte tiles (16 x 16 x 64 int8
 * multiply-adds each). Linux grants the tile data state per process on request
 * (arch_prctl ARCH_REQ_XCOMP_PERM); the tile configuration is per thread. One JSON line as
 * peak_probe.h prints it. */
#define _GNU_SOURCE
#include "peak_probe.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if !defined(__AMX_INT8__) || !defined(__AMX_TILE__)
#error "amx_peak needs a build with AMX-INT8 (cc -march=native on a host that has it)"
#endif

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define ITERS 20000000L
#define MACS_PER_STEP (4.0 * 16 * 16 * 64)

struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static void *run(void *p) {
    peak_job *j = p;
    struct tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.rows[i] = 16;
        c.colsb[i] = 64;
    }
    _tile_loadconfig(&c);
    int8_t a[16 * 64], b[16 * 64];
    int32_t out[16 * 16];
    for (int i = 0; i < 16 * 64; i++) {
        a[i] = (int8_t)(i % 7 - 3);
        b[i] = (int8_t)(i % 5 - 2);
    }
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a, 64);
    _tile_loadd(6, b, 64);
    _tile_loadd(7, b, 64);
    pthread_barrier_wait(j->start);
    for (long i = 0; i < ITERS; i++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    j->sink = (double)out[0];
    return NULL;
}

int main(int argc, char **argv) {
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) {
        perror("amx_peak: tile data permission");
        return 1;
    }
    return peak_main(argc, argv, "amx_peak", "\"instruction\": \"tdpbssd\"", run, (double)ITERS * MACS_PER_STEP);
}
