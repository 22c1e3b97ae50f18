#include "engine/spec_ngram.h"

#include <string.h>

int32_t ngram_propose(const int32_t *seq, int64_t n, int32_t k, int32_t *out) {
    for (int64_t g = NGRAM_MAX; g >= NGRAM_MIN; g--) {
        if (n <= g) continue;
        const int32_t *suffix = seq + n - g;
        /* Latest first: the most recent repetition is the likeliest to continue. */
        for (int64_t j = n - g - 1; j >= 0; j--) {
            if (seq[j] != suffix[0] || memcmp(seq + j, suffix, sizeof(int32_t) * (size_t)g) != 0) continue;
            int64_t from = j + g, len = n - from < k ? n - from : k;
            memcpy(out, seq + from, sizeof(int32_t) * (size_t)len);
            return (int32_t)len;
        }
    }
    return 0;
}
