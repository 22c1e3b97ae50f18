/* Byte-pair merging of one pre-token piece. Symbols start as one token per byte and
 * the lowest-ranked adjacent pair is merged until none is mergeable; ties go to the
 * leftmost pair. A min-heap with lazy invalidation keeps this O(n log n) per piece,
 * so long pieces (runs of spaces, minified code) do not go quadratic. */
#include <stdlib.h>

#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode_tables.h"

struct bpe_heap_entry {
    int32_t rank;
    int32_t pos;    /* index of the left symbol */
    int32_t left;   /* ids the pair had when queued; stale if they changed */
    int32_t right;
    int32_t merged;
};

uint32_t byte_to_codepoint(unsigned char b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    /* The remaining bytes (0x00-0x20, 0x7F-0xA0, 0xAD) in increasing order map to 256.. */
    uint32_t k;
    if (b <= 0x20) k = b;                       /* 0..32 */
    else if (b <= 0xA0) k = 33u + (b - 0x7Fu);  /* 0x7F..0xA0 -> 33..66 */
    else k = 67;                                /* 0xAD */
    return 256u + k;
}

int codepoint_to_byte(uint32_t cp) {
    if (cp < 256) {
        unsigned char b = (unsigned char)cp;
        return byte_to_codepoint(b) == cp ? (int)b : -1;
    }
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

void bpe_scratch_free(bpe_scratch *s) {
    free(s->ids);
    free(s->prev);
    free(s->next);
    free(s->heap);
    free(s->text);
    *s = (bpe_scratch){0};
}

static int scratch_reserve(bpe_scratch *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    bpe_scratch g = {0};
    g.ids = malloc(cap * sizeof *g.ids);
    g.prev = malloc(cap * sizeof *g.prev);
    g.next = malloc(cap * sizeof *g.next);
    /* Each merge queues at most two new pairs: n-1 initial + 2(n-1) later. */
    g.heap = malloc(3 * cap * sizeof *g.heap);
    g.text = malloc(2 * cap); /* byte_to_codepoint stays below U+0800: 2 UTF-8 bytes */
    if (!g.ids || !g.prev || !g.next || !g.heap || !g.text) {
        bpe_scratch_free(&g);
        return -1;
    }
    g.cap = cap;
    bpe_scratch_free(s);
    *s = g;
    return 0;
}

static int entry_less(const struct bpe_heap_entry *a, const struct bpe_heap_entry *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct bpe_heap_entry *h, size_t *n, struct bpe_heap_entry e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!entry_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static struct bpe_heap_entry heap_pop(struct bpe_heap_entry *h, size_t *n) {
    struct bpe_heap_entry top = h[0];
    struct bpe_heap_entry last = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && entry_less(&h[c + 1], &h[c])) c++;
        if (!entry_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m > 0) h[i] = last;
    return top;
}

static void queue_pair(const struct tokenizer *t, bpe_scratch *s, size_t *hn, int32_t pos) {
    int32_t nx = s->next[pos];
    if (nx < 0) return;
    int32_t a = s->ids[pos], b = s->ids[nx];
    if (a < 0 || b < 0) return;
    const merge_slot *m = tok_find_merge(t, a, b);
    if (!m) return;
    heap_push(s->heap, hn, (struct bpe_heap_entry){m->rank, pos, a, b, m->id});
}

int bpe_encode_piece(const struct tokenizer *t, bpe_scratch *s, const unsigned char *piece,
                     size_t len, bpe_emit_fn emit, void *ctx) {
    if (len == 0) return 0;
    if (len == 1) {
        int32_t id = t->byte_id[piece[0]];
        emit(ctx, id >= 0 ? id : t->unk);
        return 0;
    }
    if (len > INT32_MAX / 4 || scratch_reserve(s, len) != 0) return -1;
    if (t->ignore_merges) {
        /* A piece that is itself an ordinary vocabulary token is that token, merges or not
         * (Hugging Face BPE's ignore_merges; Llama-3's tokenizer.json sets it). */
        size_t tl = 0;
        for (size_t i = 0; i < len; i++) tl += (size_t)utf8_encode(byte_to_codepoint(piece[i]), (unsigned char *)s->text + tl);
        int32_t id = tok_lookup(t, s->text, tl);
        if (id >= 0 && t->type[id] != TOKTYPE_CONTROL && t->type[id] != TOKTYPE_USER_DEFINED) {
            emit(ctx, id);
            return 0;
        }
    }
    /* Bytes without a token (a vocabulary may lack e.g. 0xFF) become the unknown token;
     * with fuse_unk adjacent ones fuse into a single unknown (Hugging Face BPE's option). */
    int32_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = t->byte_id[piece[i]];
        if (id < 0 && n > 0 && s->ids[n - 1] < 0 && t->fuse_unk) continue;
        s->ids[n] = id;
        s->prev[n] = n - 1;
        s->next[n] = -1;
        if (n > 0) s->next[n - 1] = n;
        n++;
    }
    size_t hn = 0;
    for (int32_t i = 0; i + 1 < n; i++) queue_pair(t, s, &hn, i);
    while (hn > 0) {
        struct bpe_heap_entry e = heap_pop(s->heap, &hn);
        int32_t nx = s->next[e.pos];
        /* Stale if either side was merged away or changed since the pair was queued. */
        if (s->ids[e.pos] != e.left || nx < 0 || s->ids[nx] != e.right) continue;
        s->ids[e.pos] = e.merged;
        int32_t nn = s->next[nx];
        s->next[e.pos] = nn;
        if (nn >= 0) s->prev[nn] = e.pos;
        s->ids[nx] = -2; /* dead: never equals a queued id */
        if (s->prev[e.pos] >= 0) queue_pair(t, s, &hn, s->prev[e.pos]);
        queue_pair(t, s, &hn, e.pos);
    }
    for (int32_t i = 0; i >= 0; i = s->next[i]) emit(ctx, s->ids[i] >= 0 ? s->ids[i] : t->unk);
    return 0;
}
