/* The KV block pool (src/engine/block_pool.c) on its own: allocation order, exhaustion,
 * free and reuse, reference counts of shared prefix blocks, the LRU eviction of cached
 * blocks nobody uses, hash-table chains, caching off, the hash chain itself, and dropping
 * the cache (after a weight update). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/block_pool.h"

/* A hash whose bucket is chosen: the table indexes buckets by the low bits of lo. */
static block_hash hash_in_bucket(uint64_t bucket, uint64_t tag) { return (block_hash){(tag << 20) | bucket, tag}; }

static void test_alloc_order_and_exhaustion(void **state) {
    (void)state;
    block_pool p;
    assert_int_equal(block_pool_init(&p, 5, true), 0);
    assert_int_equal(block_pool_available(&p), 5);
    /* Lowest ids first, so a run's block tables do not depend on anything but its history. */
    for (int32_t i = 0; i < 5; i++) {
        assert_int_equal(block_pool_alloc(&p), i);
        assert_int_equal(p.ref[i], 1);
        assert_int_equal(block_pool_available(&p), 4 - i);
    }
    assert_int_equal(block_pool_alloc(&p), -1);
    assert_int_equal(block_pool_alloc(&p), -1); /* still none, nothing corrupted */
    assert_int_equal(block_pool_available(&p), 0);
    block_pool_free(&p);
}

static void test_empty_pool(void **state) {
    (void)state;
    block_pool p;
    assert_int_equal(block_pool_init(&p, 0, true), 0);
    assert_int_equal(block_pool_available(&p), 0);
    assert_int_equal(block_pool_alloc(&p), -1);
    assert_int_equal(block_pool_lookup(&p, hash_in_bucket(0, 1)), -1);
    block_pool_free(&p);
}

static void test_release_and_reuse(void **state) {
    (void)state;
    block_pool p;
    assert_int_equal(block_pool_init(&p, 4, true), 0);
    int32_t a = block_pool_alloc(&p), b = block_pool_alloc(&p), c = block_pool_alloc(&p);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(c, 2);
    block_pool_release(&p, b);
    assert_int_equal(p.ref[b], 0);
    assert_int_equal(block_pool_available(&p), 2);
    /* The free list is a stack: the block just released comes back first. */
    assert_int_equal(block_pool_alloc(&p), b);
    assert_int_equal(block_pool_alloc(&p), 3);
    assert_int_equal(block_pool_alloc(&p), -1);
    block_pool_release(&p, a);
    block_pool_release(&p, c);
    assert_int_equal(block_pool_alloc(&p), c);
    assert_int_equal(block_pool_alloc(&p), a);
    block_pool_free(&p);
}

static void test_shared_prefix_refcounts(void **state) {
    (void)state;
    block_pool p;
    assert_int_equal(block_pool_init(&p, 4, true), 0);
    int32_t tok[16];
    for (int i = 0; i < 16; i++) tok[i] = 100 + i;
    block_hash h = block_hash_next((block_hash){0, 0}, tok, 16);

    int32_t id = block_pool_alloc(&p);
    block_pool_register(&p, id, h);
    assert_true(p.cached[id]);
    /* Two more sequences with the same prefix share the block. */
    assert_int_equal(block_pool_lookup(&p, h), id);
    assert_int_equal(block_pool_lookup(&p, h), id);
    assert_int_equal(p.ref[id], 3);
    assert_int_equal(p.hits, 2);
    assert_int_equal(p.lookups, 2);
    assert_int_equal(block_pool_available(&p), 3); /* in use: neither free nor evictable */

    block_pool_release(&p, id);
    block_pool_release(&p, id);
    assert_int_equal(p.ref[id], 1);
    assert_int_equal(p.n_lru, 0);
    assert_int_equal(block_pool_available(&p), 3);
    /* Last user gone: the block stays cached, evictable, and can still be hit. */
    block_pool_release(&p, id);
    assert_int_equal(p.ref[id], 0);
    assert_int_equal(p.n_lru, 1);
    assert_int_equal(block_pool_available(&p), 4);
    assert_int_equal(block_pool_lookup(&p, h), id);
    assert_int_equal(p.ref[id], 1);
    assert_int_equal(p.n_lru, 0);
    assert_int_equal(block_pool_available(&p), 3);

    /* A miss is counted as a lookup, not a hit. */
    block_hash other = block_hash_next(h, tok, 16);
    assert_int_equal(block_pool_lookup(&p, other), -1);
    assert_int_equal(p.hits, 3);
    assert_int_equal(p.lookups, 4);
    block_pool_free(&p);
}

static void test_lru_eviction_oldest_first(void **state) {
    (void)state;
    block_pool p;
    assert_int_equal(block_pool_init(&p, 3, true), 0);
    block_hash h[3];
    int32_t id[3];
    for (int i = 0; i < 3; i++) {
        h[i] = hash_in_bucket((uint64_t)i, (uint64_t)i + 1);
        id[i] = block_pool_alloc(&p);
        block_pool_register(&p, id[i], h[i]);
    }
    /* Released in the order 1, 0, 2: that is the eviction order. */
    block_pool_release(&p, id[1]);
    block_pool_release(&p, id[0]);
    block_pool_release(&p, id[2]);
    assert_int_equal(p.n_free, 0);
    assert_int_equal(block_pool_available(&p), 3);

    int32_t e = block_pool_alloc(&p);
    assert_int_equal(e, id[1]);
    assert_int_equal(p.ref[e], 1);
    assert_false(p.cached[e]);
    assert_int_equal(block_pool_lookup(&p, h[1]), -1);    /* evicted: its prefix is gone */
    assert_int_equal(block_pool_lookup(&p, h[0]), id[0]); /* the others are still there */
    /* id[0] is in use again, so the next eviction skips it. */
    assert_int_equal(block_pool_alloc(&p), id[2]);
    assert_int_equal(block_pool_lookup(&p, h[2]), -1);
    assert_int_equal(block_pool_alloc(&p), -1);

    /* An evicted block is no longer cached: released, it goes to the free list. */
    block_pool_release(&p, e);
    assert_int_equal(p.n_free, 1);
    assert_int_equal(p.n_lru, 0);
    assert_int_equal(block_pool_alloc(&p), e);
    block_pool_free(&p);
}

static void test_free_list_before_eviction(void **state) {
    (void)state;
    block_pool p;
    assert_int_equal(block_pool_init(&p, 2, true), 0);
    block_hash h = hash_in_bucket(1, 7);
    int32_t a = block_pool_alloc(&p), b = block_pool_alloc(&p);
    block_pool_register(&p, a, h);
    block_pool_release(&p, a); /* evictable */
    block_pool_release(&p, b); /* free */
    /* A never-cached block is taken before a cached one is evicted. */
    assert_int_equal(block_pool_alloc(&p), b);
    assert_int_equal(block_pool_lookup(&p, h), a);
    block_pool_free(&p);
}

static void test_bucket_chains(void **state) {
    (void)state;
    /* 8 blocks, 8 buckets: six hashes in bucket 3 make a chain; evicting from its middle
     * must leave the rest reachable. */
    block_pool p;
    assert_int_equal(block_pool_init(&p, 8, true), 0);
    assert_int_equal(p.n_buckets, 8);
    block_hash h[6];
    int32_t id[6];
    for (int i = 0; i < 6; i++) {
        h[i] = hash_in_bucket(3, (uint64_t)i + 10);
        id[i] = block_pool_alloc(&p);
        block_pool_register(&p, id[i], h[i]);
    }
    for (int i = 0; i < 6; i++) assert_int_equal(block_pool_lookup(&p, h[i]), id[i]);
    for (int i = 0; i < 6; i++) block_pool_release(&p, id[i]); /* lookup refs */
    /* Same lo, different hi: a different block. */
    assert_int_equal(block_pool_lookup(&p, (block_hash){h[2].lo, h[2].hi + 1}), -1);
    /* Make id[3] the oldest evictable block, take the two free ones and evict it. */
    block_pool_release(&p, id[3]);
    for (int i = 0; i < 6; i++)
        if (i != 3) block_pool_release(&p, id[i]);
    assert_int_equal(block_pool_alloc(&p), 6);
    assert_int_equal(block_pool_alloc(&p), 7);
    assert_int_equal(block_pool_alloc(&p), id[3]);
    assert_int_equal(block_pool_lookup(&p, h[3]), -1);
    for (int i = 0; i < 6; i++)
        if (i != 3) assert_int_equal(block_pool_lookup(&p, h[i]), id[i]);
    block_pool_free(&p);
}

static void test_register_is_idempotent(void **state) {
    (void)state;
    block_pool p;
    assert_int_equal(block_pool_init(&p, 3, true), 0);
    block_hash h = hash_in_bucket(2, 5), g = hash_in_bucket(2, 6);
    int32_t a = block_pool_alloc(&p), b = block_pool_alloc(&p);
    block_pool_register(&p, a, h);
    /* The same hash on another block: the first stays the cached one, b is not cached. */
    block_pool_register(&p, b, h);
    assert_false(p.cached[b]);
    /* A second hash for an already cached block is ignored too. */
    block_pool_register(&p, a, g);
    assert_int_equal(block_pool_lookup(&p, g), -1);
    assert_int_equal(block_pool_lookup(&p, h), a);
    block_pool_release(&p, a);
    block_pool_release(&p, a);
    block_pool_release(&p, b);
    assert_int_equal(p.n_lru, 1);  /* a */
    assert_int_equal(p.n_free, 2); /* b and the untouched third block */
    block_pool_free(&p);
}

static void test_caching_off(void **state) {
    (void)state;
    block_pool p;
    assert_int_equal(block_pool_init(&p, 2, false), 0);
    block_hash h = hash_in_bucket(0, 9);
    int32_t a = block_pool_alloc(&p);
    block_pool_register(&p, a, h);
    assert_false(p.cached[a]);
    assert_int_equal(block_pool_lookup(&p, h), -1);
    assert_int_equal(p.lookups, 0);
    assert_int_equal(p.hits, 0);
    block_pool_release(&p, a);
    assert_int_equal(p.n_free, 2);
    assert_int_equal(p.n_lru, 0);
    block_pool_free(&p);
}

static void test_hash_chain(void **state) {
    (void)state;
    int32_t tok[16];
    for (int i = 0; i < 16; i++) tok[i] = i * 31 + 7;
    block_hash zero = {0, 0};
    block_hash h1 = block_hash_next(zero, tok, 16);
    block_hash again = block_hash_next(zero, tok, 16);
    assert_true(h1.lo == again.lo && h1.hi == again.hi);
    assert_false(h1.lo == 0 && h1.hi == 0);
    /* The same tokens after a different prefix hash differently: a hit needs the whole chain. */
    block_hash h2 = block_hash_next(h1, tok, 16);
    assert_false(h2.lo == h1.lo && h2.hi == h1.hi);
    /* Any one token, and the count, changes the hash. */
    for (int i = 0; i < 16; i++) {
        tok[i]++;
        block_hash t = block_hash_next(zero, tok, 16);
        assert_false(t.lo == h1.lo && t.hi == h1.hi);
        tok[i]--;
    }
    block_hash shorter = block_hash_next(zero, tok, 15);
    assert_false(shorter.lo == h1.lo && shorter.hi == h1.hi);
}

static void test_drop_cache(void **state) {
    (void)state;
    block_pool p;
    assert_int_equal(block_pool_init(&p, 4, true), 0);
    int32_t a = block_pool_alloc(&p), b = block_pool_alloc(&p), c = block_pool_alloc(&p);
    block_pool_register(&p, a, hash_in_bucket(1, 1));
    block_pool_register(&p, b, hash_in_bucket(1, 2)); /* same bucket: a chain */
    block_pool_register(&p, c, hash_in_bucket(2, 3));
    block_pool_release(&p, a);
    block_pool_release(&p, b); /* a, b: cached and unused (LRU); c: cached and in use */
    assert_int_equal(p.n_lru, 2);
    block_pool_drop_cache(&p);
    assert_int_equal(p.n_lru, 0);
    assert_int_equal(p.n_free, 3); /* a, b and the never-used block */
    assert_int_equal(block_pool_available(&p), 3);
    for (uint64_t t = 1; t <= 3; t++) assert_int_equal(block_pool_lookup(&p, hash_in_bucket(t == 3 ? 2 : 1, t)), -1);
    assert_false(p.cached[c]);
    assert_int_equal(p.ref[c], 1);
    block_pool_release(&p, c); /* uncached now: back to the free list, not the LRU */
    assert_int_equal(p.n_free, 4);
    assert_int_equal(p.n_lru, 0);
    block_pool_register(&p, block_pool_alloc(&p), hash_in_bucket(1, 1)); /* the table still works */
    assert_true(block_pool_lookup(&p, hash_in_bucket(1, 1)) >= 0);
    block_pool_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_order_and_exhaustion),
        cmocka_unit_test(test_empty_pool),
        cmocka_unit_test(test_release_and_reuse),
        cmocka_unit_test(test_shared_prefix_refcounts),
        cmocka_unit_test(test_lru_eviction_oldest_first),
        cmocka_unit_test(test_free_list_before_eviction),
        cmocka_unit_test(test_bucket_chains),
        cmocka_unit_test(test_register_is_idempotent),
        cmocka_unit_test(test_caching_off),
        cmocka_unit_test(test_hash_chain),
        cmocka_unit_test(test_drop_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
