/* Hand-written equivalents of the pre-tokenizer regexes (see pretokenize.h).
 * Each matcher returns the length of the regex's match at position i, reproducing
 * the leftmost-alternative semantics and backtracking of the original pattern. */
#include "tokenizer/pretokenize.h"

#include <stdint.h>
#include <string.h>

#include "tokenizer/unicode_tables.h"

/* Character flags: the class bits plus the few literal characters the regexes name. */
enum {
    F_L = 1,    /* \p{L} */
    F_N = 2,    /* \p{N} */
    F_WS = 4,   /* \s */
    F_SP = 8,   /* U+0020 (the " ?" in the patterns) */
    F_NL = 16   /* \r or \n */
};

typedef struct {
    const unsigned char *s;
    size_t n;       /* end of the text the regex sees (lookahead stops here) */
    size_t hard;    /* SmolLM: positions of \p{N} chars act as ends too (see gpt2_match) */
} cursor;

/* Flags of the character at pos (pos < n) and its byte length. */
static unsigned char_at(const unsigned char *s, size_t n, size_t pos, size_t *clen) {
    unsigned char c = s[pos];
    if (c < 0x80) {
        *clen = 1;
        if (c == ' ') return F_WS | F_SP;
        if (c == '\n' || c == '\r') return F_WS | F_NL;
        if (c >= 0x09 && c <= 0x0D) return F_WS;
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return F_L;
        if (c >= '0' && c <= '9') return F_N;
        return 0;
    }
    uint32_t cp;
    int l = utf8_decode(s + pos, n - pos, &cp);
    if (l == 0) { *clen = 1; return 0; } /* invalid byte: a character in no class */
    *clen = (size_t)l;
    switch (unicode_class(cp)) {
    case UCLASS_LETTER: return F_L;
    case UCLASS_NUMBER: return F_N;
    case UCLASS_SPACE: return F_WS;
    default: return 0;
    }
}

static int is_other(unsigned f) { return (f & (F_L | F_N | F_WS)) == 0; }

/* End of the run of characters starting at i whose flags intersect `want` (or, when
 * want == 0, that are in no class), stopping at n. */
static size_t run_end(const cursor *c, size_t i, unsigned want) {
    while (i < c->n) {
        size_t l;
        unsigned f = char_at(c->s, c->n, i, &l);
        if (want ? !(f & want) : !is_other(f)) break;
        i += l;
    }
    return i;
}

/* \s+(?!\S) | \s+ at i (a whitespace char): the whole run if it reaches the end,
 * otherwise all but its last character (leaving that one to prefix the next word),
 * unless the run is a single character. `stop_at_digit`: SmolLM ends a segment at
 * every digit, and the regex sees a segment end there. */
static size_t ws_match(const cursor *c, size_t i, int stop_at_digit) {
    size_t j = i, last = i, count = 0;
    while (j < c->n) {
        size_t l;
        unsigned f = char_at(c->s, c->n, j, &l);
        if (!(f & F_WS)) {
            if (stop_at_digit && (f & F_N)) return j - i;
            break;
        }
        last = j;
        j += l;
        count++;
    }
    if (j == c->n || count < 2) return j - i;
    return last - i;
}

/* GPT-2 contractions are case-sensitive: 's 't 'm 'd 're 've 'll. */
static size_t gpt2_contraction(const cursor *c, size_t i) {
    if (i + 1 >= c->n) return 0;
    unsigned char a = c->s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= c->n) return 0;
    unsigned char b = c->s[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

static size_t gpt2_match(const cursor *c, size_t i, int digits_split) {
    const unsigned char *s = c->s;
    if (s[i] == '\'') {
        size_t m = gpt2_contraction(c, i);
        if (m) return m;
    }
    size_t l;
    unsigned f = char_at(s, c->n, i, &l);
    if (digits_split && (f & F_N)) return l;
    size_t start = i;
    if ((f & F_SP) && i + 1 < c->n) {
        /* " ?X+": a space joins a following letter / number / symbol run. */
        size_t l2;
        unsigned g = char_at(s, c->n, i + 1, &l2);
        if (g & F_L) return run_end(c, i + 1, F_L) - start;
        if ((g & F_N) && !digits_split) return run_end(c, i + 1, F_N) - start;
        if (is_other(g)) return run_end(c, i + 1, 0) - start;
    }
    if (f & F_L) return run_end(c, i, F_L) - start;
    if (f & F_N) return run_end(c, i, F_N) - start;
    if (is_other(f)) return run_end(c, i, 0) - start;
    return ws_match(c, i, digits_split);
}

/* Case-insensitive contraction letter at p: ASCII, plus U+017F (long s), which Unicode
 * case folding maps to 's'. Returns the folded ASCII letter and its byte length. */
static unsigned char fold_at(const cursor *c, size_t p, size_t *len) {
    if (p >= c->n) return 0;
    unsigned char b = c->s[p];
    if (b < 0x80) {
        *len = 1;
        return (b >= 'A' && b <= 'Z') ? (unsigned char)(b | 0x20) : b;
    }
    if (b == 0xC5 && p + 1 < c->n && c->s[p + 1] == 0xBF) { *len = 2; return 's'; }
    return 0;
}

static size_t llama3_contraction(const cursor *c, size_t i) {
    size_t la = 0, lb = 0;
    unsigned char a = fold_at(c, i + 1, &la);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1 + la;
    if (!a) return 0;
    unsigned char b = fold_at(c, i + 1 + la, &lb);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 1 + la + lb;
    return 0;
}

static size_t llama3_match(const cursor *c, size_t i, int max_digits) {
    const unsigned char *s = c->s;
    if (s[i] == '\'') {
        size_t m = llama3_contraction(c, i);
        if (m) return m;
    }
    size_t l;
    unsigned f = char_at(s, c->n, i, &l);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (f & F_L) return run_end(c, i, F_L) - i;
    if (!(f & (F_N | F_NL)) && i + l < c->n) {
        size_t l2;
        if (char_at(s, c->n, i + l, &l2) & F_L) return run_end(c, i + l, F_L) - i;
    }
    /* \p{N}{1,max_digits} */
    if (f & F_N) {
        size_t j = i + l;
        for (int k = 1; k < max_digits && j < c->n; k++) {
            size_t l2;
            if (!(char_at(s, c->n, j, &l2) & F_N)) break;
            j += l2;
        }
        return j - i;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t j = i;
    unsigned g = f;
    if ((f & F_SP) && i + 1 < c->n) {
        size_t l2;
        g = char_at(s, c->n, i + 1, &l2);
        j = i + 1;
    }
    if (is_other(g)) {
        j = run_end(c, j, 0);
        while (j < c->n && (s[j] == '\r' || s[j] == '\n')) j++;
        return j - i;
    }
    /* \s*[\r\n]+ : up to and including the run's last newline, if it has one. */
    size_t k = i, nl_end = 0;
    while (k < c->n) {
        size_t l2;
        unsigned h = char_at(s, c->n, k, &l2);
        if (!(h & F_WS)) break;
        k += l2;
        if (h & F_NL) nl_end = k;
    }
    if (nl_end) return nl_end - i;
    return ws_match(c, i, 0);
}

int pretok_kind_from_name(const char *name, size_t len, pretok_kind *out) {
    static const struct { const char *name; pretok_kind kind; } names[] = {
        {"gpt2", PRETOK_GPT2},       {"default", PRETOK_GPT2},
        {"smollm", PRETOK_SMOLLM},   {"starcoder", PRETOK_SMOLLM},
        {"refact", PRETOK_SMOLLM},   {"llama3", PRETOK_LLAMA3},
        {"llama-bpe", PRETOK_LLAMA3}, {"llama-v3", PRETOK_LLAMA3},
        {"smaug-bpe", PRETOK_LLAMA3}, {"dbrx", PRETOK_LLAMA3},
        {"qwen2", PRETOK_QWEN2},
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        if (strlen(names[k].name) == len && memcmp(names[k].name, name, len) == 0) {
            *out = names[k].kind;
            return 0;
        }
    }
    return -1;
}

int pretok_split(pretok_kind kind, const char *text, size_t len, pretok_emit_fn emit, void *ctx) {
    cursor c = {(const unsigned char *)text, len, 0};
    size_t i = 0;
    while (i < len) {
        size_t m;
        switch (kind) {
        case PRETOK_SMOLLM: m = gpt2_match(&c, i, 1); break;
        case PRETOK_LLAMA3: m = llama3_match(&c, i, 3); break;
        case PRETOK_QWEN2: m = llama3_match(&c, i, 1); break;
        default: m = gpt2_match(&c, i, 0); break;
        }
        if (m == 0) m = 1; /* unreachable by construction; guarantees progress */
        int rc = emit(ctx, text + i, m);
        if (rc) return rc;
        i += m;
    }
    return 0;
}
