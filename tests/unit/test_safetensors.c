/* safetensors parser tests: valid files (tensors, scalars, empty tensors, metadata, header
 * padding), every truncation of a valid file, and hand-made hostile headers (bad and
 * overlapping offsets, huge header lengths, wrong dtypes, sizes that disagree, misaligned
 * data, duplicate names) that must fail with a clear one-line error. Then shard sets in a
 * temporary directory: a good index, and indexes that lie or point outside the directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/quant.h"
#include "formats/safetensors.h"
#include "formats/safetensors_set.h"

/* A file image: u64 header length, the header, then data_len data bytes (0, 1, 2, ...).
 * The buffer is 64-byte aligned so the data's alignment is the header length's; make()
 * pads the header with spaces to a multiple of 8, as the reference writer does. */
typedef struct {
    uint8_t *p;
    size_t n;
} image;

static image make_padded(const char *header, size_t data_len, bool pad) {
    size_t len = strlen(header), h = pad ? (len + 7) / 8 * 8 : len;
    image im = {aligned_alloc(64, (8 + h + data_len + 63) / 64 * 64), 8 + h + data_len};
    assert_non_null(im.p);
    uint64_t hl = h;
    memcpy(im.p, &hl, 8); /* little-endian host */
    memcpy(im.p + 8, header, len);
    memset(im.p + 8 + len, ' ', h - len);
    for (size_t i = 0; i < data_len; i++) im.p[8 + h + i] = (uint8_t)i;
    return im;
}

static image make(const char *header, size_t data_len) { return make_padded(header, data_len, true); }

static int parse(const image *im, st_file **f, char *err, size_t errlen) {
    return st_open_memory(im->p, im->n, f, err, errlen);
}

/* The header must parse; returns the file (caller closes). */
static st_file *must_parse(const char *header, size_t data_len, image *keep) {
    *keep = make(header, data_len);
    st_file *f;
    char err[256] = "";
    int rc = parse(keep, &f, err, sizeof err);
    if (rc) fail_msg("unexpected error: %s", err);
    return f;
}

/* The header must fail with an error line that contains `want`. */
static void must_fail(const char *header, size_t data_len, const char *want) {
    image im = make(header, data_len);
    st_file *f = (st_file *)1;
    char err[256] = "";
    int rc = parse(&im, &f, err, sizeof err);
    if (rc == 0) fail_msg("parsed but should fail (%s): %s", want, header);
    assert_int_equal(rc, ST_ERR_FORMAT);
    assert_null(f);
    if (!strstr(err, want)) fail_msg("error '%s' lacks '%s'", err, want);
    assert_null(strchr(err, '\n'));
    free(im.p);
}

static void test_valid(void **state) {
    (void)state;
    image im;
    st_file *f = must_parse("{\"__metadata__\":{\"format\":\"pt\"},"
                            "\"b.weight\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
                            "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                            "\"s\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[32,34]},"
                            "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[34,34]}}",
                            34, &im);
    assert_int_equal(st_n_tensors(f), 4);
    const st_tensor *a = st_get_tensor(f, 0), *b = st_find_tensor(f, "b.weight");
    assert_string_equal(a->name, "a.weight"); /* sorted by name */
    assert_int_equal(a->type, INVAR_T_F32);
    assert_int_equal(a->n_dims, 2);
    assert_int_equal(a->shape[0], 2);
    assert_int_equal(a->shape[1], 3);
    assert_int_equal(a->nbytes, 24);
    size_t hl = strlen((const char *)im.p + 8);
    assert_ptr_equal(a->data, im.p + 8 + hl);
    assert_non_null(b);
    assert_int_equal(b->type, INVAR_T_BF16);
    assert_ptr_equal(b->data, im.p + 8 + hl + 24);
    const st_tensor *s = st_find_tensor(f, "s");
    assert_int_equal(s->n_dims, 0);
    assert_int_equal(s->nbytes, 2);
    assert_int_equal(st_find_tensor(f, "empty")->nbytes, 0);
    assert_null(st_find_tensor(f, "missing"));
    assert_null(st_get_tensor(f, 4));
    st_close(f);
    free(im.p);

    f = must_parse("{}", 0, &im); /* no tensors at all */
    assert_int_equal(st_n_tensors(f), 0);
    st_close(f);
    free(im.p);
}

static void test_every_truncation_fails(void **state) {
    (void)state;
    image im = make("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16);
    for (size_t n = 0; n < im.n; n++) {
        st_file *f;
        char err[256];
        if (st_open_memory(im.p, n, &f, err, sizeof err) == 0) fail_msg("truncation to %zu bytes parsed", n);
        assert_null(strchr(err, '\n'));
    }
    free(im.p);
}

static void test_header_length(void **state) {
    (void)state;
    uint8_t small[7] = {0};
    st_file *f;
    char err[256];
    assert_int_equal(st_open_memory(small, sizeof small, &f, err, sizeof err), ST_ERR_FORMAT);
    assert_non_null(strstr(err, "too small"));
    uint64_t lens[] = {UINT64_MAX, 1ull << 63, ST_MAX_HEADER + 1, 1000};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        uint8_t b[64] = {0};
        memcpy(b, &lens[i], 8);
        memcpy(b + 8, "{}", 2);
        assert_int_equal(st_open_memory(b, sizeof b, &f, err, sizeof err), ST_ERR_FORMAT);
        assert_non_null(strstr(err, i < 3 ? "exceeds the 100000000-byte limit" : "runs past the end"));
    }
    assert_int_equal(st_open_memory(NULL, 0, &f, err, sizeof err), ST_ERR_FORMAT);
}

static void test_bad_json(void **state) {
    (void)state;
    must_fail("[1, 2]", 0, "does not start with a JSON object");
    must_fail("{\"a\":", 0, "not valid JSON");
    must_fail("{} x", 0, "bytes after its JSON object");
    must_fail("{\"w\": 3}", 0, "entry is not an object");
    must_fail("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "needs a string dtype");
    must_fail("{\"__metadata__\": [1]}", 0, "__metadata__ is not an object");
    must_fail("{\"__metadata__\": {\"k\": 1}}", 0, "__metadata__ 'k' is not a string");
}

static void test_bad_dtype(void **state) {
    (void)state;
    const char *bad[] = {"I64", "F64", "U8", "BOOL", "F8_E4M3", "f32", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char h[256];
        snprintf(h, sizeof h, "{\"w\":{\"dtype\":\"%s\",\"shape\":[2],\"data_offsets\":[0,16]}}", bad[i]);
        must_fail(h, 16, "is not supported (F32, F16, BF16)");
    }
    must_fail("{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "needs a string dtype");
}

static void test_bad_offsets(void **state) {
    (void)state;
    const char *w = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":";
    struct { const char *offs; const char *want; } cases[] = {
        {"[0,16]", "outside the 8-byte data section"},
        {"[8,0]", "outside"},
        {"[9007199254740992,9007199254740992]", "outside"},
        {"[9007199254740994,9007199254740994]", "two non-negative integers"}, /* above 2^53 */
        {"[0,1e300]", "two non-negative integers"},
        {"[-8,0]", "two non-negative integers"},
        {"[0.5,8.5]", "two non-negative integers"},
        {"[\"0\",8]", "two non-negative integers"},
        {"[0]", "two non-negative integers"},
        {"[0,8,8]", "two non-negative integers"},
        {"[0,4]", "span 4 bytes but shape x F32 needs 8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char h[256];
        snprintf(h, sizeof h, "%s%s}}", w, cases[i].offs);
        must_fail(h, 8, cases[i].want);
    }
    must_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{}}}", 8, "needs a string dtype");
}

static void test_bad_shapes(void **state) {
    (void)state;
    must_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
              "9 dimensions (at most 8)");
    must_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0] is not");
    must_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[1, 2.5],\"data_offsets\":[0,4]}}", 4, "shape[1] is not");
    must_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
              "element count overflows");
    must_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[4503599627370496,1024],\"data_offsets\":[0,4]}}", 4,
              "byte size overflows");
    must_fail("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 12");
}

static void test_overlap_duplicates_alignment(void **state) {
    (void)state;
    must_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
              "tensors 'a' and 'b' have overlapping data_offsets");
    must_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 16, "overlapping");
    must_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "tensor 'a' appears twice");
    /* An unpadded header of odd length: no F32 can start where the data does. */
    image bad = make_padded("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} ", 4, false);
    assert_true((8 + strlen((const char *)bad.p + 8)) % 4 != 0);
    st_file *bf;
    char berr[256];
    assert_int_equal(parse(&bad, &bf, berr, sizeof berr), ST_ERR_FORMAT);
    assert_non_null(strstr(berr, "not aligned for F32"));
    free(bad.p);
    /* Control bytes of a hostile name are not echoed. */
    must_fail("{\"a\\u0001\\n\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "tensor 'a?" "?'");
    /* Zero-size tensors may sit anywhere, even inside another's range. */
    image im;
    st_file *f = must_parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                            "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8, &im);
    assert_int_equal(st_n_tensors(f), 2);
    st_close(f);
    free(im.p);
}

/* ---- shard sets -------------------------------------------------------------------- */

static char g_dir[64];

static void write_file(const char *name, const void *p, size_t n) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void write_shard(const char *name, const char *header, size_t data_len) {
    image im = make(header, data_len);
    write_file(name, im.p, im.n);
    free(im.p);
}

static void write_index(const char *json) { write_file("model.safetensors.index.json", json, strlen(json)); }

static void set_must_fail(const char *want) {
    st_set *s = (st_set *)1;
    char err[512] = "";
    if (st_set_open(g_dir, &s, err, sizeof err) == 0) fail_msg("set opened but should fail (%s)", want);
    assert_null(s);
    if (!strstr(err, want)) fail_msg("error '%s' lacks '%s'", err, want);
}

static void test_shard_sets(void **state) {
    (void)state;
    strcpy(g_dir, "/tmp/invar_st_XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    set_must_fail("model.safetensors"); /* nothing there */

    write_shard("model.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    st_set *s;
    char err[512];
    assert_int_equal(st_set_open(g_dir, &s, err, sizeof err), 0);
    assert_int_equal(st_set_n_tensors(s), 1);
    assert_non_null(st_set_find(s, "x"));
    st_set_close(s);

    write_shard("model-00001-of-00002.safetensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}", 8);
    write_shard("model-00002-of-00002.safetensors", "{\"c\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4);
    write_index("{\"metadata\":{\"total_size\":12},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
                "\"b\":\"model-00001-of-00002.safetensors\",\"c\":\"model-00002-of-00002.safetensors\"}}");
    assert_int_equal(st_set_open(g_dir, &s, err, sizeof err), 0); /* the index wins over model.safetensors */
    assert_int_equal(st_set_n_tensors(s), 3);
    assert_string_equal(st_set_tensor(s, 2)->name, "c");
    assert_int_equal(st_set_find(s, "b")->type, INVAR_T_BF16);
    assert_null(st_set_find(s, "x"));
    st_set_close(s);

    write_index("{\"weight_map\":{\"a\":\"model-00002-of-00002.safetensors\",\"b\":\"model-00001-of-00002.safetensors\","
                "\"c\":\"model-00002-of-00002.safetensors\"}}");
    set_must_fail("tensor 'a' is not in model-00002-of-00002.safetensors");
    write_index("{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\"}}");
    set_must_fail("the shards hold 2 tensors, the index lists 1"); /* b is left out */
}

static void test_shard_sets_hostile(void **state) {
    (void)state;
    write_index("{\"weight_map\":{\"a\":\"../model-00001-of-00002.safetensors\"}}");
    set_must_fail("does not name a .safetensors file of the directory");
    write_index("{\"weight_map\":{\"a\":\"/etc/passwd\"}}");
    set_must_fail("does not name");
    write_index("{\"weight_map\":{\"a\":\"model.bin\"}}");
    set_must_fail("does not name");
    write_index("{\"weight_map\":{\"a\":7}}");
    set_must_fail("does not name");
    write_index("{\"weight_map\":[]}");
    set_must_fail("no weight_map object");
    write_index("{\"weight_map\":");
    set_must_fail("not valid JSON");
    write_index("{\"weight_map\":{\"a\":\"missing-shard.safetensors\"}}");
    set_must_fail("missing-shard.safetensors: cannot open");
    write_shard("dup.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    write_index("{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"z\":\"dup.safetensors\"}}");
    set_must_fail("tensor 'a' is in two shards");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_every_truncation_fails),
        cmocka_unit_test(test_header_length),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_bad_dtype),
        cmocka_unit_test(test_bad_offsets),
        cmocka_unit_test(test_bad_shapes),
        cmocka_unit_test(test_overlap_duplicates_alignment),
        cmocka_unit_test(test_shard_sets),
        cmocka_unit_test(test_shard_sets_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
