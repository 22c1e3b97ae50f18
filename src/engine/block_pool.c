#include "engine/block_pool.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int block_pool_init(block_pool *p, int64_t n, bool caching) {
    memset(p, 0, sizeof *p);
    size_t sz = (size_t)(n > 0 ? n : 1);
    p->n_total = n;
    p->caching = caching;
    p->n_buckets = 1;
    while (p->n_buckets < n) p->n_buckets <<= 1;
    p->ref = calloc(sz, sizeof *p->ref);
    p->cached = calloc(sz, sizeof *p->cached);
    p->hash = calloc(sz, sizeof *p->hash);
    p->free_ids = malloc(sz * sizeof *p->free_ids);
    p->lru_prev = malloc(sz * sizeof *p->lru_prev);
    p->lru_next = malloc(sz * sizeof *p->lru_next);
    p->chain = malloc(sz * sizeof *p->chain);
    p->bucket = malloc((size_t)p->n_buckets * sizeof *p->bucket);
    if (!p->ref || !p->cached || !p->hash || !p->free_ids || !p->lru_prev || !p->lru_next || !p->chain ||
        !p->bucket) {
        block_pool_free(p);
        return -1;
    }
    /* Lowest ids on top of the stack: allocation order is reproducible run to run. */
    for (int64_t i = 0; i < n; i++) p->free_ids[i] = (int32_t)(n - 1 - i);
    p->n_free = n;
    for (int64_t b = 0; b < p->n_buckets; b++) p->bucket[b] = -1;
    p->lru_head = p->lru_tail = -1;
    return 0;
}

void block_pool_free(block_pool *p) {
    free(p->ref), free(p->cached), free(p->hash), free(p->free_ids);
    free(p->lru_prev), free(p->lru_next), free(p->chain), free(p->bucket);
    memset(p, 0, sizeof *p);
}

int64_t block_pool_available(const block_pool *p) { return p->n_free + p->n_lru; }

static void lru_remove(block_pool *p, int32_t id) {
    int32_t a = p->lru_prev[id], b = p->lru_next[id];
    if (a >= 0) p->lru_next[a] = b; else p->lru_head = b;
    if (b >= 0) p->lru_prev[b] = a; else p->lru_tail = a;
    p->n_lru--;
}

static void lru_push(block_pool *p, int32_t id) {
    p->lru_prev[id] = p->lru_tail;
    p->lru_next[id] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = id; else p->lru_head = id;
    p->lru_tail = id;
    p->n_lru++;
}

static int64_t bucket_of(const block_pool *p, block_hash h) { return (int64_t)(h.lo & (uint64_t)(p->n_buckets - 1)); }

static void table_remove(block_pool *p, int32_t id) {
    int32_t *link = &p->bucket[bucket_of(p, p->hash[id])];
    while (*link != id) link = &p->chain[*link];
    *link = p->chain[id];
    p->cached[id] = false;
}

int32_t block_pool_alloc(block_pool *p) {
    int32_t id;
    if (p->n_free > 0) {
        id = p->free_ids[--p->n_free];
    } else if (p->lru_head >= 0) {
        id = p->lru_head;
        lru_remove(p, id);
        table_remove(p, id);
    } else {
        return -1;
    }
    p->ref[id] = 1;
    return id;
}

void block_pool_release(block_pool *p, int32_t id) {
    if (--p->ref[id] > 0) return;
    if (p->cached[id]) lru_push(p, id);
    else p->free_ids[p->n_free++] = id;
}

block_hash block_hash_next(block_hash prev, const int32_t *tokens, int64_t n) {
    uint8_t buf[sizeof prev + sizeof(int32_t) * 64];
    size_t len = sizeof(int32_t) * (size_t)(n < 64 ? n : 64); /* blocks are KV_BLOCK = 16 tokens */
    memcpy(buf, &prev, sizeof prev);
    memcpy(buf + sizeof prev, tokens, len);
    XXH128_hash_t h = XXH3_128bits(buf, sizeof prev + len);
    return (block_hash){h.low64, h.high64};
}

static int32_t table_find(const block_pool *p, block_hash h) {
    for (int32_t id = p->bucket[bucket_of(p, h)]; id >= 0; id = p->chain[id])
        if (p->hash[id].lo == h.lo && p->hash[id].hi == h.hi) return id;
    return -1;
}

int32_t block_pool_lookup(block_pool *p, block_hash h) {
    if (!p->caching) return -1;
    p->lookups++;
    int32_t id = table_find(p, h);
    if (id < 0) return -1;
    if (p->ref[id]++ == 0) lru_remove(p, id);
    p->hits++;
    return id;
}

void block_pool_register(block_pool *p, int32_t id, block_hash h) {
    if (!p->caching || p->cached[id] || table_find(p, h) >= 0) return;
    p->hash[id] = h;
    p->cached[id] = true;
    int64_t b = bucket_of(p, h);
    p->chain[id] = p->bucket[b];
    p->bucket[b] = id;
}

void block_pool_drop_cache(block_pool *p) {
    for (int64_t id = 0; id < p->n_total; id++) {
        if (!p->cached[id]) continue;
        table_remove(p, (int32_t)id);
        if (p->ref[id] == 0) {
            lru_remove(p, (int32_t)id);
            p->free_ids[p->n_free++] = (int32_t)id;
        }
    }
}
