/* KV-cache blocks: reference counts, a free list, and the prefix cache.
 *
 * A full block can be registered under the hash chain of its tokens (the block's tokens and
 * the hash of the blocks before it, XXH3-128). A later sequence whose prefix has the same
 * chain reuses the block: its K/V were computed for the same tokens at the same positions,
 * and the forward pass gives those bits whatever the batch, so a hit is bitwise identical to
 * recomputing. Cached blocks nobody uses wait in LRU order and are evicted when the free
 * list runs dry. */
#ifndef INVAR_BLOCK_POOL_H
#define INVAR_BLOCK_POOL_H
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint64_t lo, hi;
} block_hash;

typedef struct {
    int64_t n_total;
    int32_t *ref;                 /* users of each block */
    bool *cached;                 /* registered in the prefix table */
    block_hash *hash;             /* of cached blocks */
    int32_t *free_ids;            /* never-cached free blocks (stack) */
    int64_t n_free;
    int32_t *lru_prev, *lru_next; /* cached blocks with ref == 0, oldest first */
    int32_t lru_head, lru_tail;
    int64_t n_lru;
    int32_t *bucket, *chain;      /* hash table: bucket heads, next block in bucket */
    int64_t n_buckets;
    bool caching;                 /* prefix caching on */
    int64_t hits, lookups;        /* blocks found / blocks looked up */
} block_pool;

int block_pool_init(block_pool *p, int64_t n_total, bool caching);
void block_pool_free(block_pool *p);

/* Blocks that can be taken now: free plus evictable. */
int64_t block_pool_available(const block_pool *p);
/* A block for exclusive use (ref 1), evicting the least recently used cached block if the
 * free list is empty; -1 if none. */
int32_t block_pool_alloc(block_pool *p);
void block_pool_release(block_pool *p, int32_t id);

/* Hash chain: the hash of a block of tokens following the block with hash prev. */
block_hash block_hash_next(block_hash prev, const int32_t *tokens, int64_t n);
/* A cached block with this hash, its ref taken; -1 if none (or caching off). */
int32_t block_pool_lookup(block_pool *p, block_hash h);
/* Offers a full block to the cache (no-op if caching is off or the hash is present). */
void block_pool_register(block_pool *p, int32_t id, block_hash h);
/* Forgets every cached block (the model's weights changed: their K/V are stale). Unused
 * ones go back to the free list; blocks in use stay with their users, uncached. */
void block_pool_drop_cache(block_pool *p);

#endif
