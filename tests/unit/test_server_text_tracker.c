/* The server's text tracker (src/server/text_tracker.c) on the default model's vocabulary:
 * tokens become text, a UTF-8 character split across tokens is never streamed in halves,
 * stop strings are found across token boundaries and cut (the earliest wins), the bytes
 * that may still begin a stop string are held back, and end-of-generation tokens add no
 * text. Tokens are fed one at a time, as the engine thread delivers them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine_fixture.h"
#include "server/text_tracker.h"

static invar_model *g_model;
static int32_t g_byte_tok[256]; /* a token whose text is exactly this one byte, or -1 */
static int32_t g_eog = -1;

static int setup(void **state) {
    (void)state;
    g_model = fixture_model();
    for (int b = 0; b < 256; b++) g_byte_tok[b] = -1;
    for (int32_t id = 0; id < invar_model_n_vocab(g_model); id++) {
        char buf[8];
        int n = invar_token_bytes(g_model, id, buf, sizeof buf);
        if (n == 1 && g_byte_tok[(unsigned char)buf[0]] < 0) g_byte_tok[(unsigned char)buf[0]] = id;
        if (g_eog < 0 && invar_token_is_eog(g_model, id)) g_eog = id;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    invar_model_free(g_model);
    return 0;
}

static invar_token_info info(int32_t id, float lp) {
    invar_token_info t = {0};
    t.token = id;
    t.logprob = lp;
    return t;
}

/* Adds one token per byte of s (the byte-level vocabulary has one for every byte). */
static void add_bytes(text_tracker *t, const char *s) {
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        assert_true(g_byte_tok[*c] >= 0);
        invar_token_info ti = info(g_byte_tok[*c], -(float)*c);
        assert_true(tt_add(t, g_model, &ti, 1));
    }
}

static void assert_text(const text_tracker *t, size_t from, size_t to, const char *want) {
    char *s = tt_text(t, from, to);
    assert_non_null(s);
    assert_string_equal(s, want);
    free(s);
}

static void test_tokens_become_text(void **state) {
    (void)state;
    static const char text[] = "Hello world, how are you?";
    int32_t ids[64];
    int64_t n = invar_tokenize(g_model, text, sizeof text - 1, false, false, ids, 64);
    assert_true(n > 3 && n < 64);
    text_tracker t;
    tt_init(&t, NULL, 0);
    for (int64_t i = 0; i < n; i++) {
        invar_token_info ti = info(ids[i], -0.5f * (float)i);
        assert_true(tt_add(&t, g_model, &ti, 1));
        assert_int_equal(t.n_tokens, i + 1);
        assert_int_equal(t.n_kept, i + 1);
        assert_int_equal(tt_safe_end(&t, false), t.len); /* no stop strings: nothing held */
    }
    assert_int_equal(t.len, sizeof text - 1);
    assert_memory_equal(t.raw, text, t.len);
    assert_text(&t, 0, t.len, text);
    /* Each token's start offset, and the token info copied as given. */
    size_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_int_equal(t.tok_start[i], at);
        assert_int_equal(t.toks[i].token, ids[i]);
        assert_true(t.toks[i].logprob == -0.5f * (float)i);
        char buf[64];
        at += (size_t)invar_token_bytes(g_model, ids[i], buf, sizeof buf);
    }
    assert_false(t.stopped);
    tt_free(&t);
}

static void test_utf8_split_across_tokens(void **state) {
    (void)state;
    text_tracker t;
    tt_init(&t, NULL, 0);
    add_bytes(&t, "a");
    assert_int_equal(tt_safe_end(&t, false), 1);
    /* U+1F642 (4 bytes) one byte per token: nothing of it is safe until the last byte. */
    add_bytes(&t, "\xF0");
    assert_int_equal(tt_safe_end(&t, false), 1);
    add_bytes(&t, "\x9F");
    assert_int_equal(tt_safe_end(&t, false), 1);
    add_bytes(&t, "\x99");
    assert_int_equal(tt_safe_end(&t, false), 1);
    add_bytes(&t, "\x82");
    assert_int_equal(tt_safe_end(&t, false), 5);
    /* A 2-byte and a 3-byte character, split the same way. */
    add_bytes(&t, "\xC3");
    assert_int_equal(tt_safe_end(&t, false), 5);
    add_bytes(&t, "\xA9\xE2\x82");
    assert_int_equal(tt_safe_end(&t, false), 7);
    add_bytes(&t, "\xAC");
    assert_int_equal(tt_safe_end(&t, false), 10);
    assert_text(&t, 0, 10, "a\xF0\x9F\x99\x82\xC3\xA9\xE2\x82\xAC");
    tt_free(&t);
}

static void test_incomplete_utf8_at_the_end(void **state) {
    (void)state;
    text_tracker t;
    tt_init(&t, NULL, 0);
    add_bytes(&t, "ok\xE2\x82");
    assert_int_equal(tt_safe_end(&t, false), 2);
    /* The generation ended mid-character: everything goes out, the stray bytes as U+FFFD. */
    assert_int_equal(tt_safe_end(&t, true), 4);
    assert_text(&t, 2, 4, "\xEF\xBF\xBD\xEF\xBF\xBD");
    /* An invalid byte is not held back forever: a lone continuation byte is safe. */
    text_tracker u;
    tt_init(&u, NULL, 0);
    add_bytes(&u, "x\x80");
    assert_int_equal(tt_safe_end(&u, false), 2);
    assert_text(&u, 0, 2, "x\xEF\xBF\xBD");
    tt_free(&u);
    tt_free(&t);
}

static void test_stop_string_across_tokens(void **state) {
    (void)state;
    const char *stops[] = {"END"};
    text_tracker t;
    tt_init(&t, stops, 1);
    add_bytes(&t, "xy");
    /* "END" is 3 bytes: the last 2 may be its start and are held back. */
    assert_int_equal(tt_safe_end(&t, false), 0);
    add_bytes(&t, "zE");
    assert_int_equal(tt_safe_end(&t, false), 2);
    add_bytes(&t, "N");
    assert_int_equal(tt_safe_end(&t, false), 3);
    assert_false(t.stopped);
    add_bytes(&t, "D");
    assert_true(t.stopped);
    assert_int_equal(t.len, 3);
    assert_text(&t, 0, t.len, "xyz");
    assert_int_equal(tt_safe_end(&t, false), 3); /* stopped: all of the cut text is final */
    /* Six tokens consumed; the three whose text starts before the cut are reported. */
    assert_int_equal(t.n_tokens, 6);
    assert_int_equal(t.n_kept, 3);
    /* Later tokens are ignored. */
    add_bytes(&t, "more");
    assert_int_equal(t.n_tokens, 6);
    assert_int_equal(t.len, 3);
    tt_free(&t);
}

static void test_stop_string_inside_one_token(void **state) {
    (void)state;
    static const char text[] = "Hello world";
    int32_t ids[16];
    int64_t n = invar_tokenize(g_model, text, sizeof text - 1, false, false, ids, 16);
    assert_true(n >= 1);
    char first[64];
    int b = invar_token_bytes(g_model, ids[0], first, sizeof first);
    assert_true(b >= 3);
    /* A stop string in the middle of the first token: text cut inside it, the token kept. */
    char stop[3] = {first[1], first[2], 0};
    const char *stops[] = {stop};
    text_tracker t;
    tt_init(&t, stops, 1);
    invar_token_info ti[16];
    for (int64_t i = 0; i < n; i++) ti[i] = info(ids[i], 0);
    assert_true(tt_add(&t, g_model, ti, n)); /* all at once: the rest are ignored */
    assert_true(t.stopped);
    assert_int_equal(t.len, 1);
    assert_memory_equal(t.raw, first, 1);
    assert_int_equal(t.n_tokens, 1);
    assert_int_equal(t.n_kept, 1);
    tt_free(&t);
}

static void test_earliest_stop_wins(void **state) {
    (void)state;
    /* Both complete with the same byte; the one starting first decides the cut. */
    const char *stops[] = {"cd", "bcd"};
    text_tracker t;
    tt_init(&t, stops, 2);
    add_bytes(&t, "abc");
    assert_false(t.stopped);
    add_bytes(&t, "d");
    assert_true(t.stopped);
    assert_int_equal(t.len, 1);
    /* The token that started the stop string ("b") is not reported. */
    assert_int_equal(t.n_kept, 1);
    tt_free(&t);

    /* Of two stops in one token's text, the one earlier in the text cuts, whatever their
     * order in the list. */
    static const char text[] = "Hello world";
    int32_t ids[16];
    int64_t n = invar_tokenize(g_model, text, sizeof text - 1, false, false, ids, 16);
    assert_int_equal(n, 2);
    char word[16];
    assert_int_equal(invar_token_bytes(g_model, ids[1], word, sizeof word), 6);
    assert_memory_equal(word, " world", 6);
    const char *orders[2][2] = {{"ld", "wo"}, {"wo", "ld"}};
    for (int o = 0; o < 2; o++) {
        tt_init(&t, orders[o], 2);
        invar_token_info ti[2] = {info(ids[0], 0), info(ids[1], 0)};
        assert_true(tt_add(&t, g_model, ti, 2));
        assert_true(t.stopped);
        assert_int_equal(t.len, 6);
        assert_memory_equal(t.raw, "Hello ", 6);
        assert_int_equal(t.n_kept, 2); /* " world" starts before the cut */
        tt_free(&t);
    }
}

static void test_hold_back_for_the_longest_stop(void **state) {
    (void)state;
    const char *stops[] = {"S", "STOP"};
    text_tracker t;
    tt_init(&t, stops, 2);
    add_bytes(&t, "abcdefg");
    assert_int_equal(tt_safe_end(&t, false), 4);
    assert_int_equal(tt_safe_end(&t, true), 7);
    /* What was sent stays sent: the safe end never goes below emitted. */
    t.emitted = 6;
    assert_int_equal(tt_safe_end(&t, false), 6);
    tt_free(&t);

    /* Hold-back ending inside a character moves back to its start. */
    const char *ab[] = {"ab"};
    tt_init(&t, ab, 1);
    add_bytes(&t, "x\xC3\xA9");
    assert_int_equal(tt_safe_end(&t, false), 1);
    add_bytes(&t, "z");
    assert_int_equal(tt_safe_end(&t, false), 3);
    tt_free(&t);
}

static void test_eog_adds_no_text(void **state) {
    (void)state;
    assert_true(g_eog >= 0);
    const char *stops[] = {"ab"};
    text_tracker t;
    tt_init(&t, stops, 1);
    add_bytes(&t, "a");
    invar_token_info e = info(g_eog, -1.0f);
    assert_true(tt_add(&t, g_model, &e, 1));
    assert_int_equal(t.n_tokens, 2);
    assert_int_equal(t.n_kept, 2);
    assert_int_equal(t.len, 1);
    assert_int_equal(t.tok_start[1], 1);
    /* With no text of its own it does not break a stop string around it either. */
    add_bytes(&t, "b");
    assert_true(t.stopped);
    assert_int_equal(t.len, 0);
    assert_int_equal(t.n_kept, 1);
    tt_free(&t);
}

static void test_init_skips_empty_and_extra_stops(void **state) {
    (void)state;
    const char *stops[] = {"", NULL, "q", "r", "s", "t", "u"};
    text_tracker t;
    tt_init(&t, stops, 7);
    /* "" and NULL are no stop strings; at most SRV_MAX_STOPS are read from the array. */
    assert_int_equal(t.n_stops, 2);
    assert_string_equal(t.stops[0], "q");
    assert_string_equal(t.stops[1], "r");
    add_bytes(&t, "ps");
    assert_false(t.stopped);
    add_bytes(&t, "r");
    assert_true(t.stopped);
    assert_int_equal(t.len, 2);
    /* Adding nothing is fine. */
    assert_true(tt_add(&t, g_model, NULL, 0));
    tt_free(&t);
    assert_null(t.raw);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens_become_text),
        cmocka_unit_test(test_utf8_split_across_tokens),
        cmocka_unit_test(test_incomplete_utf8_at_the_end),
        cmocka_unit_test(test_stop_string_across_tokens),
        cmocka_unit_test(test_stop_string_inside_one_token),
        cmocka_unit_test(test_earliest_stop_wins),
        cmocka_unit_test(test_hold_back_for_the_longest_stop),
        cmocka_unit_test(test_eog_adds_no_text),
        cmocka_unit_test(test_init_skips_empty_and_extra_stops),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
