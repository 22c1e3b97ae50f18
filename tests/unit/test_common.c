/* The common layer (src/common/): UTF-8 clean-up, float32 text that round-trips, the clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/float_format.h"
#include "common/utf8.h"

static void expect_sanitized(const char *in, size_t len, const char *want) {
    char *got = utf8_sanitize(in, len);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static void test_utf8_valid_text_is_kept(void **state) {
    (void)state;
    const char *ok = "caf\xC3\xA9 \xE6\x9D\xB1 \xF0\x9F\x99\x82"; /* 2-, 3- and 4-byte forms */
    expect_sanitized(ok, strlen(ok), ok);
    expect_sanitized("", 0, "");
    expect_sanitized("a\0b", 3, "a"); /* NUL is valid: the copy keeps it, the C string ends there */
}

static void test_utf8_invalid_bytes_become_replacement(void **state) {
    (void)state;
    const char *fffd = "\xEF\xBF\xBD";
    char want[64];
    snprintf(want, sizeof want, "a%sb", fffd);
    expect_sanitized("a\xFF" "b", 3, want);           /* never valid */
    expect_sanitized("a\xC0\xAF" "b", 4, "a\xEF\xBF\xBD\xEF\xBF\xBD" "b"); /* overlong '/' */
    expect_sanitized("a\xED\xA0\x80" "b", 5, "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b"); /* surrogate */
    expect_sanitized("a\xF4\x90\x80\x80", 5, "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"); /* > U+10FFFF */
    expect_sanitized("x\xE6\x9D", 3, "x\xEF\xBF\xBD\xEF\xBF\xBD"); /* cut mid-character */
}

static void test_format_f32_round_trips_with_fewest_digits(void **state) {
    (void)state;
    char buf[32];
    format_f32(buf, sizeof buf, 0.1f);
    assert_string_equal(buf, "0.1");
    format_f32(buf, sizeof buf, -0.24506187f);
    assert_string_equal(buf, "-0.24506187");
    format_f32(buf, sizeof buf, INFINITY);
    assert_string_equal(buf, "1e309");
    format_f32(buf, sizeof buf, -INFINITY);
    assert_string_equal(buf, "-1e309");
    /* Every float32 bit pattern of a spread of magnitudes reads back exactly. */
    uint32_t bits = 0x00800000u; /* smallest normal */
    for (int i = 0; i < 20000; i++, bits += 0x0001A3F1u) {
        float v;
        memcpy(&v, &bits, sizeof v);
        if (!isfinite(v)) break;
        format_f32(buf, sizeof buf, -v);
        assert_true(strtof(buf, NULL) == -v);
    }
}

static void test_clock_is_monotonic(void **state) {
    (void)state;
    double a = now_seconds(), b = now_seconds();
    assert_true(a > 0.0 && b >= a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_valid_text_is_kept),
        cmocka_unit_test(test_utf8_invalid_bytes_become_replacement),
        cmocka_unit_test(test_format_f32_round_trips_with_fewest_digits),
        cmocka_unit_test(test_clock_is_monotonic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
