/* The tokenizer's private state, shared by its loader, BPE and codec files. */
#ifndef INVAR_TOKENIZER_INTERNAL_H
#define INVAR_TOKENIZER_INTERNAL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

/* GGUF tokenizer.ggml.token_type values. */
enum {
    TOKTYPE_NORMAL = 1, TOKTYPE_UNKNOWN = 2, TOKTYPE_CONTROL = 3,
    TOKTYPE_USER_DEFINED = 4, TOKTYPE_UNUSED = 5, TOKTYPE_BYTE = 6
};

/* Merge table entry: the pair (left,right) of token ids merges into `id` with priority
 * `rank` (lower first). key == 0 marks an empty slot (tok_pair_key is never 0). */
typedef struct {
    uint64_t key;
    int32_t rank;
    int32_t id;
} merge_slot;

struct tokenizer {
    int32_t n_vocab;
    /* Token strings as written in the GGUF (byte-level alphabet), back to back. */
    char *text;
    uint32_t *text_off;     /* n_vocab + 1 offsets into text */
    /* Raw bytes of each token (byte mapping undone), back to back. */
    char *bytes;
    uint32_t *bytes_off;    /* n_vocab + 1 offsets into bytes */
    uint8_t *type;          /* TOKTYPE_* per token */
    uint8_t *eog;           /* 1 if the token ends generation */

    int32_t *vocab_slots;   /* open addressing: token text -> id, -1 empty */
    uint64_t vocab_mask;
    merge_slot *merge_slots;
    uint64_t merge_mask;

    int32_t byte_id[256];   /* token of each single byte (its one mapped char), -1 if none */

    /* Control and user-defined tokens matched in text, grouped by first byte and
     * longest first within a group: special_ids[special_start[b] .. special_start[b+1]). */
    int32_t *special_ids;
    uint32_t special_start[257];

    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos;
    bool ignore_merges;     /* a piece that is a vocabulary token is that token (tokenizers' BPE option) */
    bool fuse_unk;          /* adjacent bytes without a token give one unknown token, not one each */
    bool nfc;               /* text between special tokens is put in Unicode NFC first (normalize.h) */
    pretok_kind pre;
};

/* What a tokenizer is built from, whichever file it came from (GGUF metadata or a
 * Hugging Face tokenizer.json): tokenizer_build copies everything it keeps. */
typedef struct {
    const char *s;
    size_t len;
} tok_text;

typedef struct {
    int32_t n_vocab;
    const tok_text *tokens;  /* byte-level alphabet; control / user-defined ones as plain text */
    const uint8_t *types;    /* TOKTYPE_* per token */
    uint64_t n_merges;
    const tok_text *merges;  /* rank r merges merges[2r] + merges[2r+1]; an empty half skips it */
    int32_t bos, eos, eot, eom, unk, pad; /* -1: none */
    const int32_t *eog_ids;  /* more ids that end generation (generation_config.json), or NULL */
    size_t n_eog_ids;
    bool add_bos, ignore_merges, fuse_unk, nfc;
    pretok_kind pre;
} tok_spec;

/* 0, or -1 with a message. Ids outside [0, n_vocab) count as none. */
int tokenizer_build(const tok_spec *spec, tokenizer **out, char *err, size_t errlen);

static inline uint64_t tok_hash64(uint64_t x) {
    /* splitmix64 finaliser: cheap and mixes every input bit into the low bits. */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static inline uint64_t tok_pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; /* +1: never 0 for valid ids */
}

/* Merge lookup: returns the slot for (a,b) or NULL. */
static inline const merge_slot *tok_find_merge(const struct tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = tok_pair_key(a, b);
    uint64_t i = tok_hash64(key) & t->merge_mask;
    for (;;) {
        const merge_slot *s = &t->merge_slots[i];
        if (s->key == key) return s;
        if (s->key == 0) return NULL;
        i = (i + 1) & t->merge_mask;
    }
}

/* Token id for the exact text (byte-level alphabet), -1 if absent. */
int32_t tok_lookup(const struct tokenizer *t, const char *s, size_t len);

/* Scratch memory for BPE over one piece; grown on demand, reused across pieces. */
typedef struct {
    int32_t *ids;
    int32_t *prev, *next;
    struct bpe_heap_entry *heap;
    char *text;       /* the piece in the byte-level alphabet (ignore_merges), 2 bytes per byte */
    size_t cap;       /* piece bytes the arrays can hold */
} bpe_scratch;

void bpe_scratch_free(bpe_scratch *s);

/* BPE-encodes one pre-token piece (raw bytes). Calls emit for each resulting id in order.
 * Returns 0, or -1 on allocation failure. */
typedef void (*bpe_emit_fn)(void *ctx, int32_t id);
int bpe_encode_piece(const struct tokenizer *t, bpe_scratch *s, const unsigned char *piece,
                     size_t len, bpe_emit_fn emit, void *ctx);

/* The GPT-2 byte <-> character mapping: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes take code points 256.. in order. */
uint32_t byte_to_codepoint(unsigned char b);
/* Inverse; -1 if cp is not in the byte alphabet. */
int codepoint_to_byte(uint32_t cp);

#endif
