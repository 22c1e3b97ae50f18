/* Free list of KV-cache blocks. */
#ifndef INVAR_KV_BLOCKS_H
#define INVAR_KV_BLOCKS_H
#include <stdint.h>

typedef struct {
    int64_t n_total, n_free;
    int32_t *free_ids;   /* stack of free block ids */
} kv_blocks;

int kv_blocks_init(kv_blocks *b, int64_t n_total);
void kv_blocks_free(kv_blocks *b);
/* Takes n blocks into out; all or nothing. 0 on success, -1 if too few are free. */
int kv_blocks_take(kv_blocks *b, int32_t *out, int64_t n);
void kv_blocks_release(kv_blocks *b, const int32_t *ids, int64_t n);

#endif
