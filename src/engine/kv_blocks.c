#include "kv_blocks.h"

#include <stdlib.h>

int kv_blocks_init(kv_blocks *b, int64_t n_total) {
    b->free_ids = malloc(sizeof(int32_t) * (size_t)(n_total > 0 ? n_total : 1));
    if (!b->free_ids) return -1;
    b->n_total = b->n_free = n_total;
    /* Lowest ids on top of the stack: allocation order is reproducible run to run. */
    for (int64_t i = 0; i < n_total; i++) b->free_ids[i] = (int32_t)(n_total - 1 - i);
    return 0;
}

void kv_blocks_free(kv_blocks *b) {
    free(b->free_ids);
    b->free_ids = NULL;
}

int kv_blocks_take(kv_blocks *b, int32_t *out, int64_t n) {
    if (n > b->n_free) return -1;
    for (int64_t i = 0; i < n; i++) out[i] = b->free_ids[--b->n_free];
    return 0;
}

void kv_blocks_release(kv_blocks *b, const int32_t *ids, int64_t n) {
    for (int64_t i = n - 1; i >= 0; i--) b->free_ids[b->n_free++] = ids[i];
}
