/* libFuzzer target for the GGUF parser: parse the input as a GGUF buffer, then touch
 * everything a consumer could (every key and value, every string-array element, every
 * tensor's first and last data byte, the first row of supported tensors). ASan/UBSan
 * flag any read outside the input. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "formats/gguf.h"
#include "formats/quant.h"

#define MAX_ROW 4096 /* bound the dequant work per tensor */

static volatile uint64_t g_sink; /* keeps the reads from being optimised away */

static uint64_t walk_kv(const gguf_file *f, int64_t i) {
    static const size_t elem_size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    uint64_t sum = 0;
    const char *key = gguf_kv_key(f, i);
    if (!key || gguf_find_key(f, key) != i) __builtin_trap();
    sum += (uint64_t)gguf_kv_type(f, i) + strlen(key);
    uint32_t u32;
    int64_t i64;
    float f32;
    bool b;
    const char *s;
    size_t len;
    gguf_value_type et;
    uint64_t n;
    if (gguf_get_u32(f, key, &u32)) sum += u32;
    if (gguf_get_i64(f, key, &i64)) sum += (uint64_t)i64;
    if (gguf_get_f32(f, key, &f32)) sum += __builtin_isnan(f32);
    if (gguf_get_bool(f, key, &b)) sum += b;
    if (gguf_get_str(f, key, &s, &len) && len) sum += (uint8_t)s[0] + (uint8_t)s[len - 1];
    if (gguf_get_arr_info(f, key, &et, &n)) {
        if (et == GGUF_T_STRING) {
            for (uint64_t j = 0; j < n; j++) {
                if (!gguf_get_arr_str(f, key, j, &s, &len)) __builtin_trap();
                if (len) sum += (uint8_t)s[0] + (uint8_t)s[len - 1];
            }
        }
        const uint8_t *d = gguf_get_arr_data(f, key);
        if (d && n && (size_t)et < sizeof elem_size / sizeof elem_size[0] && elem_size[et])
            sum += d[0] + d[n * elem_size[et] - 1];
    }
    return sum;
}

static uint64_t walk_tensor(const gguf_file *f, int64_t i) {
    static float row[MAX_ROW];
    const gguf_tensor *t = gguf_get_tensor(f, i);
    if (!t || gguf_find_tensor(f, t->name) != t || t->nbytes == 0) __builtin_trap();
    const uint8_t *d = t->data;
    uint64_t sum = d[0] + d[t->nbytes - 1];
    if (quant_type_supported(t->type) && t->ne[0] <= MAX_ROW) {
        dequant_row(t->type, d, row, t->ne[0]);
        sum += __builtin_isnan(row[0]);
    }
    return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f;
    char err[256];
    if (gguf_open_memory(data, size, &f, err, sizeof err) != 0) {
        if (!memchr(err, 0, sizeof err) || strchr(err, '\n')) __builtin_trap(); /* one line */
        return 0;
    }
    uint64_t sum = gguf_version(f) + gguf_alignment(f);
    for (int64_t i = 0; i < gguf_n_kv(f); i++) sum += walk_kv(f, i);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) sum += walk_tensor(f, i);
    g_sink = sum;
    gguf_close(f);
    return 0;
}
