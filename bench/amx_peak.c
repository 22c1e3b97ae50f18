/* AMX-INT8 throughput probe (one core): the tile hardware's int8 multiply-add rate, beside
 * int8_peak.c's vpdpbusd rate, for hosts that expose AMX (cpuinfo flags amx_tile,
 * amx_int8). invar's matmuls do not use AMX yet; this bounds what an AMX prefill could reach.
 *
 * build: cc -O2 -mamx-tile -mamx-int8 bench/amx_peak.c -o amx_peak
 * usage: amx_peak            prints the GMAC/s (1e9 int8 multiply-adds per second)
 * Four independent tdpbssd chains on 16 x 64-byte tiles (16 x 16 x 64 multiply-adds each);
 * Linux requires the tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM) first. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

int main(void)
{
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) {
        perror("amx_peak: tile data permission");
        return 1;
    }
    struct tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.rows[i] = 16;
        c.colsb[i] = 64;
    }
    _tile_loadconfig(&c);
    static int8_t a[16 * 64], b[16 * 64];
    static int32_t out[16 * 16];
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
    const long steps = 20000000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < steps; i++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    _tile_stored(0, out, 64);
    _tile_release();
    const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    /* out[0] is printed so the chains cannot be dropped. */
    printf("{\"amx_int8_gmacs\": %.1f, \"check\": %d}\n", 4.0 * (double)steps * 16 * 16 * 64 / s / 1e9, out[0]);
    return 0;
}
