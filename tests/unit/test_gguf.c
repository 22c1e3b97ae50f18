/* GGUF parser tests: a tiny in-test writer builds valid files covering every metadata
 * type, arrays, alignment and tensors; corrupted variants (every truncation, byte flips,
 * hand-made hostile headers) must fail with one error line or parse without OOB reads
 * (the ASan build checks the latter). Ends with the real default model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "formats/quant.h"

/* ---- tiny GGUF writer ---------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u8(buf *b, uint8_t v) { put(b, &v, 1); }
static void put_u16(buf *b, uint16_t v) { put(b, &v, 2); } /* host is little-endian x86 */
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_f32(buf *b, float v) { put(b, &v, 4); }
static void put_f64(buf *b, double v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void put_header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}
static void put_key(buf *b, const char *key, gguf_value_type t) {
    put_str(b, key);
    put_u32(b, t);
}
static void put_tensor_info(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                            uint64_t offset) {
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) put_u64(b, ne[i]);
    put_u32(b, type);
    put_u64(b, offset);
}
static void put_pad(buf *b, size_t align) {
    while (b->n % align) put_u8(b, 0);
}

/* The tensors of the "full" file: one per supported type plus two shapes of note. */
typedef struct {
    const char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
} tensor_spec;

static const tensor_spec k_tensors[] = {
    {"f32.matrix", INVAR_T_F32, 2, {8, 2, 1, 1}},
    {"f16.vec", INVAR_T_F16, 1, {4, 1, 1, 1}},
    {"q8_0", INVAR_T_Q8_0, 2, {32, 2, 1, 1}},
    {"q4_0", INVAR_T_Q4_0, 1, {64, 1, 1, 1}},
    {"q4_1", INVAR_T_Q4_1, 2, {32, 3, 1, 1}},
    {"q4_k", INVAR_T_Q4_K, 1, {256, 1, 1, 1}},
    {"q6_k", INVAR_T_Q6_K, 2, {256, 2, 1, 1}},
    {"bf16.4d", INVAR_T_BF16, 4, {2, 2, 2, 2}},
    {"q5_0.unsupported", INVAR_T_Q5_0, 1, {32, 1, 1, 1}},
};
#define N_TENSORS (sizeof k_tensors / sizeof k_tensors[0])
#define N_FULL_KV 20
#define FULL_ALIGN 64

static uint64_t spec_nbytes(const tensor_spec *t) {
    uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    return quant_row_bytes(t->type, (int64_t)t->ne[0]) * rows;
}

/* A valid v3 file with every metadata type, arrays (incl. nested), general.alignment 64
 * and the tensors above; the last tensor's data ends exactly at the end of the file, so
 * every truncation is invalid. data_off[i] receives each tensor's absolute offset. */
static buf make_full_file(uint32_t version, uint64_t *data_off) {
    buf b = {0};
    put_header(&b, version, N_TENSORS, N_FULL_KV);
    put_key(&b, "t.u8", GGUF_T_UINT8), put_u8(&b, 200);
    put_key(&b, "t.i8", GGUF_T_INT8), put_u8(&b, (uint8_t)-5);
    put_key(&b, "t.u16", GGUF_T_UINT16), put_u16(&b, 65000);
    put_key(&b, "t.i16", GGUF_T_INT16), put_u16(&b, (uint16_t)-300);
    put_key(&b, "t.u32", GGUF_T_UINT32), put_u32(&b, 4000000000u);
    put_key(&b, "t.i32", GGUF_T_INT32), put_u32(&b, (uint32_t)-70000);
    put_key(&b, "t.f32", GGUF_T_FLOAT32), put_f32(&b, 1.5f);
    put_key(&b, "t.bool", GGUF_T_BOOL), put_u8(&b, 1);
    put_key(&b, "t.str", GGUF_T_STRING), put_str(&b, "hello");
    put_key(&b, "t.u64", GGUF_T_UINT64), put_u64(&b, UINT64_MAX);
    put_key(&b, "t.i64", GGUF_T_INT64), put_u64(&b, (uint64_t)INT64_MIN);
    put_key(&b, "t.f64", GGUF_T_FLOAT64), put_f64(&b, 0.25);
    put_key(&b, "general.alignment", GGUF_T_UINT32), put_u32(&b, FULL_ALIGN);
    put_key(&b, "a.u32", GGUF_T_ARRAY), put_u32(&b, GGUF_T_UINT32), put_u64(&b, 3);
    put_u32(&b, 7), put_u32(&b, 8), put_u32(&b, 9);
    put_key(&b, "a.str", GGUF_T_ARRAY), put_u32(&b, GGUF_T_STRING), put_u64(&b, 4);
    put_str(&b, "alpha"), put_str(&b, ""), put_str(&b, "gamma"), put_str(&b, "d\xc3\xa9lta");
    put_key(&b, "a.empty", GGUF_T_ARRAY), put_u32(&b, GGUF_T_FLOAT32), put_u64(&b, 0);
    /* array of 2 arrays: [i16 x2], [string x1] */
    put_key(&b, "a.nested", GGUF_T_ARRAY), put_u32(&b, GGUF_T_ARRAY), put_u64(&b, 2);
    put_u32(&b, GGUF_T_INT16), put_u64(&b, 2), put_u16(&b, 1), put_u16(&b, 2);
    put_u32(&b, GGUF_T_STRING), put_u64(&b, 1), put_str(&b, "x");
    put_key(&b, "a.f64", GGUF_T_ARRAY), put_u32(&b, GGUF_T_FLOAT64), put_u64(&b, 2);
    put_f64(&b, -1.0), put_f64(&b, 3.0);
    put_key(&b, "a.bool", GGUF_T_ARRAY), put_u32(&b, GGUF_T_BOOL), put_u64(&b, 3);
    put_u8(&b, 1), put_u8(&b, 0), put_u8(&b, 1);
    put_key(&b, "", GGUF_T_UINT8), put_u8(&b, 42); /* an empty key is legal */

    uint64_t off = 0, rel[N_TENSORS];
    for (size_t i = 0; i < N_TENSORS; i++) {
        rel[i] = off;
        off += (spec_nbytes(&k_tensors[i]) + FULL_ALIGN - 1) / FULL_ALIGN * FULL_ALIGN;
    }
    for (size_t i = 0; i < N_TENSORS; i++)
        put_tensor_info(&b, k_tensors[i].name, k_tensors[i].n_dims, k_tensors[i].ne, k_tensors[i].type, rel[i]);
    put_pad(&b, FULL_ALIGN);
    size_t data_start = b.n;
    for (size_t i = 0; i < N_TENSORS; i++) {
        assert_int_equal(b.n, data_start + rel[i]);
        if (data_off) data_off[i] = b.n;
        uint64_t nb = spec_nbytes(&k_tensors[i]);
        for (uint64_t j = 0; j < nb; j++) put_u8(&b, (uint8_t)(j * 7 + i)); /* f16 bytes: finite */
        if (i + 1 < N_TENSORS) put_pad(&b, FULL_ALIGN);
    }
    return b;
}

/* ---- helpers ------------------------------------------------------------------------- */

/* Parses an exact-size heap copy so ASan sees any read past the end. */
static int parse_copy(const uint8_t *data, size_t n, gguf_file **f, char *err, size_t errlen) {
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    if (n) memcpy(copy, data, n);
    int rc = gguf_open_memory(copy, n, f, err, errlen);
    if (rc != 0) free(copy);
    return rc; /* on success the copy is leaked on purpose: callers expect failure */
}

/* Touches everything a consumer could: every key and value, every string-array element,
 * every tensor's first and last byte and the first row of supported types. */
static uint64_t walk(const gguf_file *f) {
    uint64_t sum = 0;
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const char *key = gguf_kv_key(f, i);
        assert_non_null(key);
        assert_int_equal(gguf_find_key(f, key), i);
        uint32_t u32;
        int64_t i64;
        float f32;
        bool bv;
        const char *s;
        size_t len;
        gguf_value_type et;
        uint64_t n;
        if (gguf_get_u32(f, key, &u32)) sum += u32;
        if (gguf_get_i64(f, key, &i64)) sum += (uint64_t)i64;
        if (gguf_get_f32(f, key, &f32)) sum += (uint64_t)isnan(f32);
        if (gguf_get_bool(f, key, &bv)) sum += bv;
        if (gguf_get_str(f, key, &s, &len) && len) sum += (uint8_t)s[0] + (uint8_t)s[len - 1];
        if (gguf_get_arr_info(f, key, &et, &n)) {
            if (et == GGUF_T_STRING) {
                for (uint64_t j = 0; j < n; j++) {
                    assert_true(gguf_get_arr_str(f, key, j, &s, &len));
                    if (len) sum += (uint8_t)s[0] + (uint8_t)s[len - 1];
                }
                assert_false(gguf_get_arr_str(f, key, n, &s, &len));
            }
            const uint8_t *d = gguf_get_arr_data(f, key);
            if (d && n) {
                static const size_t es[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
                sum += d[0] + d[n * es[et] - 1];
            }
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_get_tensor(f, i);
        assert_non_null(t);
        assert_ptr_equal(gguf_find_tensor(f, t->name), t);
        const uint8_t *d = t->data;
        sum += d[0] + d[t->nbytes - 1];
        if (quant_type_supported(t->type) && t->ne[0] <= 4096) {
            float row[4096];
            dequant_row(t->type, d, row, t->ne[0]);
            sum += (uint64_t)(row[0] != 0);
        }
    }
    return sum;
}

static void assert_one_line_error(int rc, const gguf_file *f, const char *err) {
    assert_int_not_equal(rc, 0);
    assert_null(f);
    assert_true(strlen(err) > 0);
    assert_null(strchr(err, '\n'));
}

/* Parses a hand-made hostile buffer and expects failure with `needle` in the message. */
static void expect_error(const buf *b, const char *needle) {
    gguf_file *f = (gguf_file *)1;
    char err[512];
    int rc = parse_copy(b->p, b->n, &f, err, sizeof err);
    if (rc == 0) fail_msg("expected failure containing '%s', but the file parsed", needle);
    assert_one_line_error(rc, f, err);
    if (getenv("GGUF_TEST_VERBOSE")) print_message("%s\n", err);
    if (!strstr(err, needle)) fail_msg("error '%s' lacks '%s'", err, needle);
}

/* ---- valid files ----------------------------------------------------------------------- */

static void test_full_file_metadata(void **state) {
    (void)state;
    buf b = make_full_file(3, NULL);
    gguf_file *f;
    char err[256];
    assert_int_equal(gguf_open_memory(b.p, b.n, &f, err, sizeof err), 0);
    assert_int_equal(gguf_version(f), 3);
    assert_int_equal(gguf_alignment(f), FULL_ALIGN);
    assert_int_equal(gguf_n_kv(f), N_FULL_KV);
    assert_int_equal(gguf_kv_type(f, gguf_find_key(f, "t.f64")), GGUF_T_FLOAT64);
    assert_int_equal(gguf_find_key(f, "missing"), -1);
    assert_null(gguf_kv_key(f, -1));
    assert_null(gguf_kv_key(f, N_FULL_KV));
    assert_string_equal(gguf_type_name(GGUF_T_STRING), "string");

    uint32_t u32;
    int64_t i64;
    assert_true(gguf_get_u32(f, "t.u8", &u32)), assert_int_equal(u32, 200);
    assert_false(gguf_get_u32(f, "t.i8", &u32)); /* negative */
    assert_true(gguf_get_i64(f, "t.i8", &i64)), assert_int_equal(i64, -5);
    assert_true(gguf_get_u32(f, "t.u16", &u32)), assert_int_equal(u32, 65000);
    assert_true(gguf_get_i64(f, "t.i16", &i64)), assert_int_equal(i64, -300);
    assert_true(gguf_get_u32(f, "t.u32", &u32)), assert_int_equal(u32, 4000000000u);
    assert_true(gguf_get_i64(f, "t.i32", &i64)), assert_int_equal(i64, -70000);
    assert_false(gguf_get_u32(f, "t.u64", &u32)); /* too large */
    assert_false(gguf_get_i64(f, "t.u64", &i64)); /* > INT64_MAX */
    assert_true(gguf_get_i64(f, "t.i64", &i64));
    assert_true(i64 == INT64_MIN);
    assert_false(gguf_get_u32(f, "t.f32", &u32)); /* not an integer */
    assert_false(gguf_get_u32(f, "t.bool", &u32));
    assert_false(gguf_get_u32(f, "missing", &u32));

    float fv;
    assert_true(gguf_get_f32(f, "t.f32", &fv)), assert_true(fv == 1.5f);
    assert_true(gguf_get_f32(f, "t.f64", &fv)), assert_true(fv == 0.25f);
    assert_false(gguf_get_f32(f, "t.u32", &fv));
    bool bv = false;
    assert_true(gguf_get_bool(f, "t.bool", &bv)), assert_true(bv);
    assert_false(gguf_get_bool(f, "t.u8", &bv));

    const char *s;
    size_t len;
    assert_true(gguf_get_str(f, "t.str", &s, &len));
    assert_int_equal(len, 5);
    assert_memory_equal(s, "hello", 5);
    assert_false(gguf_get_str(f, "a.str", &s, &len));
    assert_true(gguf_get_u32(f, "", &u32)), assert_int_equal(u32, 42);

    gguf_value_type et;
    uint64_t n;
    assert_true(gguf_get_arr_info(f, "a.u32", &et, &n));
    assert_int_equal(et, GGUF_T_UINT32), assert_int_equal(n, 3);
    const uint8_t *d = gguf_get_arr_data(f, "a.u32");
    assert_non_null(d);
    uint32_t vals[3];
    memcpy(vals, d, sizeof vals);
    assert_int_equal(vals[0], 7), assert_int_equal(vals[2], 9);
    assert_false(gguf_get_arr_info(f, "t.u32", &et, &n));

    assert_true(gguf_get_arr_info(f, "a.str", &et, &n));
    assert_int_equal(et, GGUF_T_STRING), assert_int_equal(n, 4);
    assert_null(gguf_get_arr_data(f, "a.str"));
    static const char *want[] = {"alpha", "", "gamma", "d\xc3\xa9lta"};
    for (int i = 3; i >= 0; i--) { /* any order: O(1) indexed access */
        assert_true(gguf_get_arr_str(f, "a.str", (uint64_t)i, &s, &len));
        assert_int_equal(len, strlen(want[i]));
        assert_memory_equal(s, want[i], len);
    }
    assert_false(gguf_get_arr_str(f, "a.str", 4, &s, &len));
    assert_false(gguf_get_arr_str(f, "a.u32", 0, &s, &len));

    assert_true(gguf_get_arr_info(f, "a.empty", &et, &n));
    assert_int_equal(et, GGUF_T_FLOAT32), assert_int_equal(n, 0);
    assert_true(gguf_get_arr_info(f, "a.nested", &et, &n));
    assert_int_equal(et, GGUF_T_ARRAY), assert_int_equal(n, 2);
    assert_null(gguf_get_arr_data(f, "a.nested"));
    assert_true(gguf_get_arr_info(f, "a.bool", &et, &n));
    assert_int_equal(et, GGUF_T_BOOL), assert_int_equal(n, 3);
    double dv[2];
    memcpy(dv, gguf_get_arr_data(f, "a.f64"), sizeof dv);
    assert_true(dv[0] == -1.0 && dv[1] == 3.0);
    gguf_close(f);
    free(b.p);
}

static void test_full_file_tensors(void **state) {
    (void)state;
    uint64_t off[N_TENSORS];
    buf b = make_full_file(3, off);
    gguf_file *f;
    char err[256];
    assert_int_equal(gguf_open_memory(b.p, b.n, &f, err, sizeof err), 0);
    assert_int_equal(gguf_n_tensors(f), N_TENSORS);
    assert_int_equal(gguf_data_offset(f) % FULL_ALIGN, 0);
    for (size_t i = 0; i < N_TENSORS; i++) {
        const gguf_tensor *t = gguf_get_tensor(f, (int64_t)i);
        assert_string_equal(t->name, k_tensors[i].name);
        assert_int_equal(t->n_dims, k_tensors[i].n_dims);
        assert_int_equal(t->type, k_tensors[i].type);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], k_tensors[i].ne[d]);
        assert_int_equal(t->nbytes, spec_nbytes(&k_tensors[i]));
        assert_ptr_equal(t->data, b.p + off[i]); /* no copy: points into the buffer */
        assert_ptr_equal(gguf_find_tensor(f, k_tensors[i].name), t);
    }
    assert_null(gguf_get_tensor(f, -1));
    assert_null(gguf_get_tensor(f, N_TENSORS));
    assert_null(gguf_find_tensor(f, "nope"));
    assert_int_equal(gguf_find_tensor(f, "q4_1")->nbytes, 3 * 20);
    assert_int_equal(gguf_find_tensor(f, "q6_k")->nbytes, 2 * 210);
    walk(f);
    gguf_close(f);
    free(b.p);
}

static void test_v2_and_default_alignment(void **state) {
    (void)state;
    buf b = make_full_file(2, NULL);
    gguf_file *f;
    char err[256];
    assert_int_equal(gguf_open_memory(b.p, b.n, &f, err, sizeof err), 0);
    assert_int_equal(gguf_version(f), 2);
    gguf_close(f);
    free(b.p);

    /* no general.alignment: data starts at the next multiple of 32 */
    buf c = {0};
    uint64_t ne[1] = {4};
    put_header(&c, 3, 1, 1);
    put_key(&c, "general.architecture", GGUF_T_STRING), put_str(&c, "llama");
    put_tensor_info(&c, "w", 1, ne, INVAR_T_F32, 0);
    size_t end = c.n;
    put_pad(&c, 32);
    for (int i = 0; i < 4; i++) put_f32(&c, (float)i);
    assert_int_equal(gguf_open_memory(c.p, c.n, &f, err, sizeof err), 0);
    assert_int_equal(gguf_alignment(f), 32);
    assert_int_equal(gguf_data_offset(f), (end + 31) / 32 * 32);
    float v[4];
    memcpy(v, gguf_get_tensor(f, 0)->data, sizeof v);
    assert_true(v[3] == 3.0f);
    gguf_close(f);
    free(c.p);

    /* header only, no tensors and no data section */
    buf e = {0};
    put_header(&e, 3, 0, 0);
    assert_int_equal(gguf_open_memory(e.p, e.n, &f, err, sizeof err), 0);
    assert_int_equal(gguf_n_kv(f), 0);
    assert_int_equal(gguf_n_tensors(f), 0);
    gguf_close(f);
    free(e.p);
}

static void test_open_file_mmap(void **state) {
    (void)state;
    buf b = make_full_file(3, NULL);
    char path[] = "/tmp/invar_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b.p, b.n), (ssize_t)b.n);
    close(fd);
    gguf_file *f;
    char err[512];
    assert_int_equal(gguf_open(path, &f, err, sizeof err), 0);
    assert_int_equal(gguf_n_tensors(f), N_TENSORS);
    walk(f);
    gguf_close(f);

    /* a truncated file on disk: error names the path */
    assert_int_equal(truncate(path, (off_t)b.n - 1), 0);
    f = (gguf_file *)1;
    int rc = gguf_open(path, &f, err, sizeof err);
    assert_one_line_error(rc, f, err);
    assert_non_null(strstr(err, path));
    unlink(path);

    f = (gguf_file *)1;
    rc = gguf_open("/nonexistent/dir/x.gguf", &f, err, sizeof err);
    assert_int_equal(rc, GGUF_ERR_IO);
    assert_one_line_error(rc, f, err);
    f = (gguf_file *)1;
    rc = gguf_open("/tmp", &f, err, sizeof err);
    assert_one_line_error(rc, f, err);
    gguf_close(NULL);
    free(b.p);
}

/* A FIFO (or any non-regular file) is rejected at once: opening one used to block forever
 * waiting for a writer. Run in a child with an alarm so a regression fails instead of hanging. */
static void test_open_rejects_fifo_without_blocking(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_fifo_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(10);
        gguf_file *f = (gguf_file *)1;
        char err[512];
        int rc = gguf_open(path, &f, err, sizeof err);
        _exit(rc == GGUF_ERR_FORMAT && f == NULL && strstr(err, "FIFO") && strstr(err, "not a regular file") ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    unlink(path);
    rmdir(dir);
    if (WIFSIGNALED(status)) fail_msg("gguf_open on a FIFO did not return (signal %d)", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    gguf_file *f = (gguf_file *)1;
    char err[512];
    int rc = gguf_open("/dev/null", &f, err, sizeof err);
    assert_one_line_error(rc, f, err);
    assert_non_null(strstr(err, "character device"));
}

/* ---- corrupted files ------------------------------------------------------------------- */

static void test_every_truncation_fails(void **state) {
    (void)state;
    buf b = make_full_file(3, NULL);
    for (size_t n = 0; n < b.n; n++) {
        gguf_file *f = (gguf_file *)1;
        char err[512];
        int rc = parse_copy(b.p, n, &f, err, sizeof err);
        if (rc == 0) fail_msg("prefix of %zu/%zu bytes parsed", n, b.n);
        assert_one_line_error(rc, f, err);
    }
    free(b.p);
}

static void test_byte_flips(void **state) {
    (void)state;
    buf b = make_full_file(3, NULL);
    static const uint8_t flips[] = {0x01, 0x02, 0x10, 0x80, 0xff, 0x7f};
    size_t ok = 0, bad = 0;
    for (size_t pos = 0; pos < b.n; pos++) {
        for (size_t k = 0; k < sizeof flips; k++) {
            uint8_t *copy = malloc(b.n);
            assert_non_null(copy);
            memcpy(copy, b.p, b.n);
            copy[pos] ^= flips[k];
            gguf_file *f = NULL;
            char err[512];
            int rc = gguf_open_memory(copy, b.n, &f, err, sizeof err);
            if (rc == 0) {
                walk(f);
                gguf_close(f);
                ok++;
            } else {
                assert_one_line_error(rc, f, err);
                bad++;
            }
            free(copy);
        }
    }
    /* data bytes may flip freely; header bytes must mostly be caught */
    assert_true(ok > 0 && bad > 0);
    free(b.p);
}

static void test_error_without_buffer(void **state) {
    (void)state;
    gguf_file *f = (gguf_file *)1;
    char err[8]; /* too small: message is truncated, still terminated */
    int rc = gguf_open_memory("GGUF", 4, &f, err, sizeof err);
    assert_one_line_error(rc, f, err);
    f = (gguf_file *)1;
    rc = gguf_open_memory("xx", 2, &f, NULL, 0);
    assert_int_not_equal(rc, 0);
    assert_null(f);
    rc = gguf_open_memory(NULL, 0, &f, err, sizeof err);
    assert_int_not_equal(rc, 0);
}

static void test_hostile_headers(void **state) {
    (void)state;
    buf b = {0};
#define RESET() (b.n = 0)
    put(&b, "GGUX", 4), put_u32(&b, 3), put_u64(&b, 0), put_u64(&b, 0);
    expect_error(&b, "bad magic");
    RESET(), put_header(&b, 1, 0, 0);
    expect_error(&b, "version 1");
    RESET(), put_header(&b, 4, 0, 0);
    expect_error(&b, "unsupported GGUF version 4");
    RESET(), put_header(&b, 0x03000000u, 0, 0);
    expect_error(&b, "big-endian");
    RESET(), put_header(&b, 3, 0, UINT64_MAX);
    expect_error(&b, "metadata count");
    RESET(), put_header(&b, 3, UINT64_MAX / 2, 0);
    expect_error(&b, "tensor count");
    RESET(), put_header(&b, 3, 1000, 1); /* small counts that still cannot fit */
    put_key(&b, "k", GGUF_T_UINT8), put_u8(&b, 0);
    expect_error(&b, "tensor count");

    /* strings and arrays whose lengths exceed the file */
    RESET(), put_header(&b, 3, 0, 1), put_u64(&b, UINT64_MAX), put(&b, "abcdefghijklmnop", 16);
    expect_error(&b, "key length");
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "s", GGUF_T_STRING), put_u64(&b, 1ull << 62), put(&b, "abc", 3);
    expect_error(&b, "string value length");
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "a", GGUF_T_ARRAY), put_u32(&b, GGUF_T_UINT64);
    put_u64(&b, UINT64_MAX / 4), put_u64(&b, 0);
    expect_error(&b, "cannot fit");
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "a", GGUF_T_ARRAY), put_u32(&b, GGUF_T_STRING);
    put_u64(&b, 1ull << 40), put_str(&b, "x");
    expect_error(&b, "string array");
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "a", GGUF_T_ARRAY), put_u32(&b, GGUF_T_STRING);
    put_u64(&b, 2), put_str(&b, "x"), put_u64(&b, 1000), put(&b, "yyyyyyyyyy", 10);
    expect_error(&b, "string array element length");
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "a", GGUF_T_ARRAY), put_u32(&b, GGUF_T_ARRAY);
    put_u64(&b, 1ull << 50), put_u64(&b, 0);
    expect_error(&b, "arrays cannot fit");

    /* types */
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "k", 13), put_u32(&b, 0);
    expect_error(&b, "unknown value type 13");
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "k", GGUF_T_ARRAY), put_u32(&b, 99), put_u64(&b, 0);
    expect_error(&b, "unknown array element type 99");
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "deep", GGUF_T_ARRAY);
    for (int i = 0; i < 20; i++) put_u32(&b, GGUF_T_ARRAY), put_u64(&b, 1);
    put_u32(&b, GGUF_T_UINT8), put_u64(&b, 0);
    expect_error(&b, "nested deeper");

    /* keys */
    RESET(), put_header(&b, 3, 0, 2);
    put_key(&b, "dup", GGUF_T_UINT8), put_u8(&b, 1);
    put_key(&b, "dup", GGUF_T_UINT32), put_u32(&b, 2);
    expect_error(&b, "duplicate key");
    RESET(), put_header(&b, 3, 0, 1), put_u64(&b, 3), put(&b, "a\0b", 3), put_u32(&b, GGUF_T_UINT8), put_u8(&b, 0);
    expect_error(&b, "NUL");

    /* alignment */
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "general.alignment", GGUF_T_UINT32), put_u32(&b, 0);
    expect_error(&b, "power of two");
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "general.alignment", GGUF_T_UINT32), put_u32(&b, 48);
    expect_error(&b, "power of two");
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "general.alignment", GGUF_T_STRING), put_str(&b, "32");
    expect_error(&b, "general.alignment");
    RESET(), put_header(&b, 3, 0, 1), put_key(&b, "general.alignment", GGUF_T_INT64), put_u64(&b, (uint64_t)-32);
    expect_error(&b, "general.alignment");
    free(b.p);
}

/* One tensor info after an empty metadata section; data follows at offset 32 (aligned). */
static buf one_tensor(const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                      size_t data_bytes) {
    buf b = {0};
    put_header(&b, 3, 1, 0);
    put_tensor_info(&b, name, n_dims, ne, type, offset);
    put_pad(&b, 32);
    for (size_t i = 0; i < data_bytes; i++) put_u8(&b, 0x11);
    return b;
}

/* general.alignment 1 and one tensor whose data starts at absolute file offset `at`
 * (at >= the end of the tensor info); returns the buffer. */
static buf align1_tensor(uint32_t type, uint64_t ne0, uint64_t at) {
    buf b = {0};
    put_header(&b, 3, 1, 1);
    put_key(&b, "general.alignment", GGUF_T_UINT32), put_u32(&b, 1);
    size_t info_end = b.n + 8 + 1 + 4 + 8 + 4 + 8; /* name "t", 1 dim, type, offset */
    assert_true(at >= info_end);
    put_tensor_info(&b, "t", 1, &ne0, type, at - info_end);
    assert_int_equal(b.n, info_end);
    while (b.n < at + quant_row_bytes(type, (int64_t)ne0)) put_u8(&b, 0);
    return b;
}

/* Issue 13 #7: general.alignment 1 let a Q8_0 tensor start at an odd address (UBSan:
 * misaligned block_q8_0 in matmul.c). Each tensor must start where its type can be read. */
static void test_alignment_one_needs_aligned_tensors(void **state) {
    (void)state;
    gguf_file *f;
    char err[256];
    buf b = align1_tensor(INVAR_T_Q8_0, 32, 96); /* alignment 1 is fine where blocks line up */
    assert_int_equal(gguf_open_memory(b.p, b.n, &f, err, sizeof err), 0);
    assert_int_equal(gguf_alignment(f), 1);
    assert_int_equal((uintptr_t)gguf_get_tensor(f, 0)->data % 2, 0);
    walk(f);
    gguf_close(f);
    free(b.p);
    b = align1_tensor(INVAR_T_Q8_0, 32, 97);
    expect_error(&b, "not aligned to the 2 bytes Q8_0 needs (general.alignment 1)");
    free(b.p);
    b = align1_tensor(INVAR_T_F32, 4, 98);
    expect_error(&b, "data at file offset 98 is not aligned to the 4 bytes F32 needs");
    free(b.p);
    b = align1_tensor(INVAR_T_Q4_K, 256, 99);
    expect_error(&b, "Q4_K needs");
    free(b.p);
}

static void test_hostile_tensors(void **state) {
    (void)state;
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    buf b = one_tensor("ok", 2, ne, INVAR_T_Q8_0, 0, 68);
    gguf_file *f;
    char err[256];
    assert_int_equal(gguf_open_memory(b.p, b.n, &f, err, sizeof err), 0);
    gguf_close(f);
    free(b.p);

    b = one_tensor("short", 2, ne, INVAR_T_Q8_0, 0, 67);
    expect_error(&b, "past the end");
    free(b.p);
    b = one_tensor("offset", 2, ne, INVAR_T_Q8_0, 32, 68);
    expect_error(&b, "past the end");
    free(b.p);
    b = one_tensor("huge offset", 2, ne, INVAR_T_Q8_0, UINT64_MAX - 31, 68);
    expect_error(&b, "past the end");
    free(b.p);
    b = one_tensor("misaligned", 2, ne, INVAR_T_Q8_0, 4, 100);
    expect_error(&b, "not a multiple of the alignment");
    free(b.p);
    b = one_tensor("dims", 5, ne, INVAR_T_Q8_0, 0, 68);
    expect_error(&b, "n_dims 5");
    free(b.p);
    b = one_tensor("new\nline", 5, ne, INVAR_T_Q8_0, 0, 68); /* names are untrusted: still one line */
    expect_error(&b, "tensor 'new?line'");
    free(b.p);
    b = one_tensor("type", 2, ne, 4, 0, 68);
    expect_error(&b, "unknown tensor type 4");
    free(b.p);
    b = one_tensor("type", 2, ne, 1000, 0, 68);
    expect_error(&b, "unknown tensor type 1000");
    free(b.p);
    b = one_tensor("block", 1, (uint64_t[]){48}, INVAR_T_Q4_1, 0, 100);
    expect_error(&b, "block size 32");
    free(b.p);
    b = one_tensor("zero", 2, (uint64_t[]){32, 0}, INVAR_T_F32, 0, 100);
    expect_error(&b, "ne[1] = 0");
    free(b.p);
    b = one_tensor("neg", 1, (uint64_t[]){(uint64_t)-32}, INVAR_T_F32, 0, 100);
    expect_error(&b, "out of range");
    free(b.p);
    b = one_tensor("count", 4, (uint64_t[]){1ull << 20, 1ull << 20, 1ull << 20, 1ull << 20}, INVAR_T_F32, 0, 100);
    expect_error(&b, "element count overflows");
    free(b.p);
    b = one_tensor("bytes", 2, (uint64_t[]){1ull << 32, 1ull << 30}, 28 /* F64 */, 0, 100);
    expect_error(&b, "byte size overflows");
    free(b.p);
    b = one_tensor("bytes", 2, (uint64_t[]){1ull << 30, 1ull << 31}, INVAR_T_F32, 0, 100);
    expect_error(&b, "past the end");
    free(b.p);

    /* duplicate tensor names */
    b = (buf){0};
    put_header(&b, 3, 2, 0);
    put_tensor_info(&b, "w", 1, ne, INVAR_T_F32, 0);
    put_tensor_info(&b, "w", 1, ne, INVAR_T_F32, 128);
    put_pad(&b, 32);
    for (int i = 0; i < 256; i++) put_u8(&b, 0);
    expect_error(&b, "duplicate tensor name");
    free(b.p);

    /* tensor name with a NUL */
    b = (buf){0};
    put_header(&b, 3, 1, 0);
    put_u64(&b, 3), put(&b, "a\0b", 3), put_u32(&b, 1), put_u64(&b, 32), put_u32(&b, INVAR_T_F32), put_u64(&b, 0);
    put_pad(&b, 32);
    for (int i = 0; i < 128; i++) put_u8(&b, 0);
    expect_error(&b, "NUL");
    free(b.p);
}

/* The committed fuzz seed corpus doubles as a regression set: valid_* must parse,
 * broken_* must fail (see tools/make_gguf_corpus.py). */
static void test_seed_corpus(void **state) {
    (void)state;
    const char *src = getenv("INVAR_SOURCE_DIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/gguf", src ? src : INVAR_SOURCE_DIR);
    DIR *d = opendir(dir);
    if (!d) {
        print_message("no seed corpus at %s: skipped\n", dir);
        skip();
    }
    int seen = 0;
    for (struct dirent *e; (e = readdir(d));) {
        bool valid = strncmp(e->d_name, "valid_", 6) == 0, broken = strncmp(e->d_name, "broken_", 7) == 0;
        if (!valid && !broken) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        uint8_t data[8192];
        size_t n = fread(data, 1, sizeof data, fp);
        fclose(fp);
        gguf_file *f = NULL;
        char err[512];
        uint8_t *copy = malloc(n ? n : 1);
        assert_non_null(copy);
        memcpy(copy, data, n);
        int rc = gguf_open_memory(copy, n, &f, err, sizeof err);
        if (valid && rc != 0) fail_msg("%s: %s", e->d_name, err);
        if (broken && rc == 0) fail_msg("%s parsed", e->d_name);
        if (rc == 0) {
            walk(f);
            gguf_close(f);
        } else {
            assert_one_line_error(rc, f, err);
        }
        free(copy);
        seen++;
    }
    closedir(d);
    assert_true(seen >= 20);
}

/* ---- the real default model ------------------------------------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_default_model(void **state) {
    (void)state;
    const char *dir = getenv("INVAR_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", dir ? dir : INVAR_SOURCE_DIR);
    if (access(path, R_OK) != 0) {
        print_message("default model not found at %s: skipped\n", path);
        skip();
    }
    gguf_file *f;
    char err[512];
    double t0 = now_ms();
    int rc = gguf_open(path, &f, err, sizeof err);
    double t1 = now_ms();
    if (rc != 0) fail_msg("%s", err);
    print_message("parsed %s in %.2f ms\n", path, t1 - t0);
    assert_int_equal(gguf_n_tensors(f), 272);
    uint32_t blocks;
    assert_true(gguf_get_u32(f, "llama.block_count", &blocks));
    assert_int_equal(blocks, 30);
    gguf_value_type et;
    uint64_t n;
    assert_true(gguf_get_arr_info(f, "tokenizer.ggml.tokens", &et, &n));
    assert_int_equal(et, GGUF_T_STRING);
    assert_int_equal(n, 49152);
    const char *s;
    size_t len;
    assert_true(gguf_get_arr_str(f, "tokenizer.ggml.tokens", 49151, &s, &len));
    assert_true(gguf_get_str(f, "general.architecture", &s, &len));
    assert_int_equal(len, 5);
    assert_memory_equal(s, "llama", 5);
    const gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_q.weight");
    assert_non_null(t);
    assert_int_equal(t->type, INVAR_T_Q4_1);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 576);
    assert_int_equal(t->ne[1], 576);
    assert_int_equal(t->nbytes, 576 / 32 * 20 * 576);
    assert_int_equal((uintptr_t)t->data % gguf_alignment(f), 0);
    t = gguf_find_tensor(f, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, INVAR_T_Q8_0);
    assert_int_equal(t->ne[1], 49152);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++)
        assert_true(quant_type_supported(gguf_get_tensor(f, i)->type));
    walk(f);
    gguf_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_file_metadata),
        cmocka_unit_test(test_full_file_tensors),
        cmocka_unit_test(test_v2_and_default_alignment),
        cmocka_unit_test(test_open_file_mmap),
        cmocka_unit_test(test_open_rejects_fifo_without_blocking),
        cmocka_unit_test(test_every_truncation_fails),
        cmocka_unit_test(test_byte_flips),
        cmocka_unit_test(test_error_without_buffer),
        cmocka_unit_test(test_hostile_headers),
        cmocka_unit_test(test_hostile_tensors),
        cmocka_unit_test(test_alignment_one_needs_aligned_tensors),
        cmocka_unit_test(test_seed_corpus),
        cmocka_unit_test(test_default_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
