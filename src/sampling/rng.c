#include "sampling/rng.h"

/* SplitMix64 finaliser: a bijective 64-bit mixer with full avalanche. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double rng_uniform(uint64_t seed, uint64_t position) {
    uint64_t h = mix64(mix64(seed + 0x9e3779b97f4a7c15ULL) ^ (position * 0xd1b54a32d192ed03ULL + 1));
    return (double)(h >> 11) * 0x1.0p-53;
}
