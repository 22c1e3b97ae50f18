/* Counter-based randomness: the draw for a token is a pure function of (seed, position),
 * so it never depends on what else ran, or in what order. */
#ifndef INVAR_RNG_H
#define INVAR_RNG_H
#include <stdint.h>

/* Uniform double in [0, 1) with 53 random bits. */
double rng_uniform(uint64_t seed, uint64_t position);

#endif
