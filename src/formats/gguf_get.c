/* Lookups on a parsed GGUF file. Everything was bounds-checked by the parser, so
 * these only check the request (index range, key presence, value type). */
#include "formats/gguf_internal.h"

#include <string.h>

uint64_t gguf_hash_name(const char *s) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static const char *name_at(const gguf_file *f, bool tensors, int64_t i) {
    return tensors ? f->tensors[i].name : f->kv[i].key;
}

int64_t gguf_index_find(const gguf_file *f, bool tensors, const char *name) {
    const gguf_index *ix = tensors ? &f->tensor_index : &f->kv_index;
    if (!ix->slots || !name) return -1;
    for (size_t s = (size_t)gguf_hash_name(name) & ix->mask;; s = (s + 1) & ix->mask) {
        int64_t v = ix->slots[s];
        if (v == 0) return -1;
        if (strcmp(name_at(f, tensors, v - 1), name) == 0) return v - 1;
    }
}

void gguf_index_add(gguf_index *ix, uint64_t hash, int64_t idx) {
    size_t s = (size_t)hash & ix->mask;
    while (ix->slots[s]) s = (s + 1) & ix->mask;
    ix->slots[s] = idx + 1;
}

static uint64_t le_bytes(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static const gguf_kv *kv_of(const gguf_file *f, const char *key) {
    int64_t i = gguf_find_key(f, key);
    return i < 0 ? NULL : &f->kv[i];
}

/* Integer value as sign + magnitude, so any integer type can be range-checked. */
static bool kv_integer(const gguf_kv *kv, bool *neg, uint64_t *mag) {
    static const uint8_t size[] = {
        [GGUF_T_UINT8] = 1, [GGUF_T_INT8] = 1, [GGUF_T_UINT16] = 2, [GGUF_T_INT16] = 2,
        [GGUF_T_UINT32] = 4, [GGUF_T_INT32] = 4, [GGUF_T_UINT64] = 8, [GGUF_T_INT64] = 8,
    };
    bool is_signed;
    switch (kv->type) {
    case GGUF_T_UINT8: case GGUF_T_UINT16: case GGUF_T_UINT32: case GGUF_T_UINT64: is_signed = false; break;
    case GGUF_T_INT8: case GGUF_T_INT16: case GGUF_T_INT32: case GGUF_T_INT64: is_signed = true; break;
    default: return false;
    }
    size_t n = size[kv->type];
    uint64_t raw = le_bytes(kv->val, n);
    uint64_t sign_bit = 1ull << (8 * n - 1);
    *neg = is_signed && (raw & sign_bit);
    /* two's complement magnitude of an n-byte negative value */
    *mag = *neg ? ((~raw + 1) & (n == 8 ? UINT64_MAX : (sign_bit << 1) - 1)) : raw;
    return true;
}

uint32_t gguf_version(const gguf_file *f) { return f->version; }
size_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
int64_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }

const char *gguf_kv_key(const gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_kv ? f->kv[i].key : NULL;
}

int64_t gguf_find_key(const gguf_file *f, const char *key) { return gguf_index_find(f, false, key); }

gguf_value_type gguf_kv_type(const gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_kv ? f->kv[i].type : (gguf_value_type)-1;
}

const char *gguf_type_name(gguf_value_type t) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_kv *kv = kv_of(f, key);
    bool neg;
    uint64_t mag;
    if (!kv || !kv_integer(kv, &neg, &mag) || neg || mag > UINT32_MAX) return false;
    *out = (uint32_t)mag;
    return true;
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = kv_of(f, key);
    bool neg;
    uint64_t mag;
    if (!kv || !kv_integer(kv, &neg, &mag)) return false;
    if (neg) {
        if (mag > (uint64_t)INT64_MAX + 1) return false;
        *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    } else {
        if (mag > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)mag;
    }
    return true;
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = kv_of(f, key);
    if (!kv) return false;
    if (kv->type == GGUF_T_FLOAT32) {
        uint32_t u = (uint32_t)le_bytes(kv->val, 4);
        memcpy(out, &u, 4);
        return true;
    }
    if (kv->type == GGUF_T_FLOAT64) {
        uint64_t u = le_bytes(kv->val, 8);
        double d;
        memcpy(&d, &u, 8);
        *out = (float)d;
        return true;
    }
    return false;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = kv_of(f, key);
    if (!kv || kv->type != GGUF_T_BOOL) return false;
    *out = kv->val[0] != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len) {
    const gguf_kv *kv = kv_of(f, key);
    if (!kv || kv->type != GGUF_T_STRING) return false;
    *s = (const char *)kv->val;
    *len = (size_t)kv->n;
    return true;
}

bool gguf_get_arr_info(const gguf_file *f, const char *key, gguf_value_type *elem, uint64_t *n) {
    const gguf_kv *kv = kv_of(f, key);
    if (!kv || kv->type != GGUF_T_ARRAY) return false;
    if (elem) *elem = kv->elem;
    if (n) *n = kv->n;
    return true;
}

bool gguf_get_arr_str(const gguf_file *f, const char *key, uint64_t i, const char **s, size_t *len) {
    const gguf_kv *kv = kv_of(f, key);
    if (!kv || kv->type != GGUF_T_ARRAY || kv->elem != GGUF_T_STRING || i >= kv->n) return false;
    const uint8_t *p = f->base + kv->str_off[i];
    *len = (size_t)le_bytes(p, 8);
    *s = (const char *)p + 8;
    return true;
}

const void *gguf_get_arr_data(const gguf_file *f, const char *key) {
    const gguf_kv *kv = kv_of(f, key);
    if (!kv || kv->type != GGUF_T_ARRAY || kv->elem == GGUF_T_STRING || kv->elem == GGUF_T_ARRAY) return NULL;
    return kv->val;
}

int64_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }

const gguf_tensor *gguf_get_tensor(const gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t i = gguf_index_find(f, true, name);
    return i < 0 ? NULL : &f->tensors[i];
}
