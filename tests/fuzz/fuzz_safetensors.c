/* libFuzzer target for the safetensors header parser: parse the input as a safetensors
 * buffer, then touch everything a consumer could (every tensor's name lookup, first and
 * last data byte, and its first row dequantised). ASan/UBSan flag any read outside the
 * input; a failure must leave one error line. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "formats/quant.h"
#include "formats/safetensors.h"

#define MAX_ROW 4096 /* bound the dequant work per tensor */

static volatile uint64_t g_sink; /* keeps the reads from being optimised away */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file *f;
    char err[256];
    if (st_open_memory(data, size, &f, err, sizeof err) != 0) {
        if (!memchr(err, 0, sizeof err) || strchr(err, '\n')) __builtin_trap(); /* one line */
        return 0;
    }
    static float row[MAX_ROW];
    uint64_t sum = 0;
    for (int64_t i = 0; i < st_n_tensors(f); i++) {
        const st_tensor *t = st_get_tensor(f, i);
        if (!t || st_find_tensor(f, t->name) != t) __builtin_trap();
        if (t->n_dims > ST_MAX_DIMS) __builtin_trap();
        const uint8_t *d = t->data;
        if (d < data || d + t->nbytes > data + size) __builtin_trap();
        if (t->nbytes == 0) continue;
        sum += d[0] + d[t->nbytes - 1];
        int64_t n = t->n_dims ? t->shape[t->n_dims - 1] : 1;
        if (n > 0 && n <= MAX_ROW) {
            dequant_row(t->type, d, row, n);
            sum += __builtin_isnan(row[0]);
        }
    }
    g_sink = sum;
    st_close(f);
    return 0;
}
