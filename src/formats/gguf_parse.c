/* GGUF v2/v3 parser. The file is hostile until proven otherwise: every length and
 * count is checked against the bytes that remain before it is used or allocated,
 * so a corrupt file costs at most O(file size) memory and yields one error line. */
#include "formats/gguf_internal.h"
#include "formats/quant.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_DEFAULT_ALIGNMENT 32
#define MAX_ARRAY_DEPTH 8          /* arrays of arrays: bounds the recursion */
#define MIN_KV_BYTES 13            /* key length + type + 1-byte value */
#define MIN_TENSOR_INFO_BYTES 24   /* name length + n_dims + type + offset */
#define MIN_NESTED_ARRAY_BYTES 12  /* element type + count */

typedef struct {
    const uint8_t *p;
    size_t size, pos;
    char ctx[128];                 /* what is being parsed, for the error line */
    bool after_read;               /* validating parsed data: pos is not where the fault is */
    char *err;
    size_t errlen;
    int code;
} reader;

__attribute__((format(printf, 3, 4)))
static bool fail(reader *r, int code, const char *fmt, ...) {
    if (r->code) return false; /* keep the first (root-cause) error */
    r->code = code;
    if (r->err && r->errlen) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (r->after_read) snprintf(r->err, r->errlen, "%s: %s", r->ctx, msg);
        else snprintf(r->err, r->errlen, "%s: %s (offset %zu)", r->ctx, msg, r->pos);
    }
    return false;
}
#define BAD(r, ...) fail((r), GGUF_ERR_FORMAT, __VA_ARGS__)

/* Sets the error context to "<what> '<name>'", with control bytes of the (untrusted)
 * name shown as '?' so the error stays one printable line. */
static void set_ctx_name(reader *r, const char *what, const char *name) {
    char safe[81];
    size_t i = 0;
    for (; name[i] && i < sizeof safe - 1; i++) {
        unsigned char c = (unsigned char)name[i];
        safe[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    safe[i] = 0;
    snprintf(r->ctx, sizeof r->ctx, "%s '%s'%s", what, safe, name[i] ? "..." : "");
}

static size_t left(const reader *r) { return r->size - r->pos; }

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static bool rd_u32(reader *r, uint32_t *v, const char *what) {
    if (left(r) < 4) return BAD(r, "file truncated reading %s", what);
    *v = le32(r->p + r->pos);
    r->pos += 4;
    return true;
}

static bool rd_u64(reader *r, uint64_t *v, const char *what) {
    if (left(r) < 8) return BAD(r, "file truncated reading %s", what);
    *v = le64(r->p + r->pos);
    r->pos += 8;
    return true;
}

static bool rd_str(reader *r, const uint8_t **s, uint64_t *len, const char *what) {
    if (!rd_u64(r, len, what)) return false;
    if (*len > left(r))
        return BAD(r, "%s length %llu exceeds the %zu bytes left", what, (unsigned long long)*len, left(r));
    *s = r->p + r->pos;
    r->pos += (size_t)*len;
    return true;
}

/* A NUL-terminated heap copy of a name read from the file; names with NUL bytes are
 * refused because lookups are by C string and would be ambiguous. */
static char *copy_name(reader *r, const uint8_t *s, uint64_t len, const char *what) {
    if (memchr(s, 0, (size_t)len)) {
        BAD(r, "%s contains a NUL byte", what);
        return NULL;
    }
    char *c = malloc((size_t)len + 1);
    if (!c) {
        fail(r, GGUF_ERR_NOMEM, "out of memory copying %s", what);
        return NULL;
    }
    memcpy(c, s, (size_t)len);
    c[len] = 0;
    return c;
}

static const uint8_t k_scalar_size[] = {
    [GGUF_T_UINT8] = 1, [GGUF_T_INT8] = 1, [GGUF_T_UINT16] = 2, [GGUF_T_INT16] = 2,
    [GGUF_T_UINT32] = 4, [GGUF_T_INT32] = 4, [GGUF_T_FLOAT32] = 4, [GGUF_T_BOOL] = 1,
    [GGUF_T_UINT64] = 8, [GGUF_T_INT64] = 8, [GGUF_T_FLOAT64] = 8,
};

static bool read_value(reader *r, uint32_t type, int depth, gguf_kv *kv);

static bool read_string_array(reader *r, uint64_t n, gguf_kv *kv) {
    if (n > left(r) / 8)
        return BAD(r, "string array of %llu elements cannot fit in the %zu bytes left", (unsigned long long)n, left(r));
    if (kv && n) {
        kv->str_off = malloc((size_t)n * sizeof *kv->str_off);
        if (!kv->str_off) return fail(r, GGUF_ERR_NOMEM, "out of memory indexing %llu strings", (unsigned long long)n);
    }
    for (uint64_t i = 0; i < n; i++) {
        size_t at = r->pos;
        const uint8_t *s;
        uint64_t len;
        if (!rd_str(r, &s, &len, "string array element")) return false;
        if (kv) kv->str_off[i] = at;
    }
    return true;
}

static bool read_array(reader *r, int depth, gguf_kv *kv) {
    uint32_t elem;
    uint64_t n;
    if (depth >= MAX_ARRAY_DEPTH) return BAD(r, "arrays nested deeper than %d levels", MAX_ARRAY_DEPTH);
    if (!rd_u32(r, &elem, "array element type") || !rd_u64(r, &n, "array length")) return false;
    if (elem > GGUF_T_FLOAT64) return BAD(r, "unknown array element type %u", elem);
    if (kv) {
        kv->elem = (gguf_value_type)elem;
        kv->n = n;
        kv->val = r->p + r->pos;
    }
    if (elem == GGUF_T_STRING) return read_string_array(r, n, kv);
    if (elem == GGUF_T_ARRAY) { /* validated and skipped; not exposed element-wise */
        if (n > left(r) / MIN_NESTED_ARRAY_BYTES)
            return BAD(r, "array of %llu arrays cannot fit in the %zu bytes left", (unsigned long long)n, left(r));
        for (uint64_t i = 0; i < n; i++)
            if (!read_array(r, depth + 1, NULL)) return false;
        return true;
    }
    size_t es = k_scalar_size[elem];
    if (n > left(r) / es)
        return BAD(r, "array of %llu %s elements cannot fit in the %zu bytes left", (unsigned long long)n,
                   gguf_type_name((gguf_value_type)elem), left(r));
    r->pos += (size_t)n * es;
    return true;
}

static bool read_value(reader *r, uint32_t type, int depth, gguf_kv *kv) {
    if (type > GGUF_T_FLOAT64) return BAD(r, "unknown value type %u", type);
    if (type == GGUF_T_ARRAY) return read_array(r, depth, kv);
    if (type == GGUF_T_STRING) {
        const uint8_t *s;
        uint64_t len;
        if (!rd_str(r, &s, &len, "string value")) return false;
        if (kv) {
            kv->val = s;
            kv->n = len;
        }
        return true;
    }
    size_t sz = k_scalar_size[type];
    if (left(r) < sz) return BAD(r, "file truncated reading a %s value", gguf_type_name((gguf_value_type)type));
    if (kv) kv->val = r->p + r->pos;
    r->pos += sz;
    return true;
}

static bool index_init(reader *r, gguf_index *ix, int64_t n) {
    size_t cap = 8;
    while (cap < (size_t)n * 2) cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots) return fail(r, GGUF_ERR_NOMEM, "out of memory for a %lld-entry index", (long long)n);
    ix->mask = cap - 1;
    return true;
}

static bool read_header(reader *r, gguf_file *f, uint64_t *n_tensors, uint64_t *n_kv) {
    snprintf(r->ctx, sizeof r->ctx, "header");
    if (r->size < 4) return BAD(r, "file too small to be GGUF (%zu bytes)", r->size);
    if (memcmp(r->p, "GGUF", 4) != 0) return BAD(r, "not a GGUF file (bad magic)");
    r->pos = 4;
    uint32_t v;
    if (!rd_u32(r, &v, "version")) return false;
    if (v == 1) return BAD(r, "GGUF version 1 is not supported");
    if (v == 0x02000000u || v == 0x03000000u) return BAD(r, "big-endian GGUF is not supported");
    if (v != 2 && v != 3) return BAD(r, "unsupported GGUF version %u", v);
    f->version = v;
    if (!rd_u64(r, n_tensors, "tensor count") || !rd_u64(r, n_kv, "metadata count")) return false;
    /* Bound the counts by the smallest possible encoding of each entry. */
    if (*n_kv > left(r) / MIN_KV_BYTES)
        return BAD(r, "metadata count %llu cannot fit in the %zu bytes left", (unsigned long long)*n_kv, left(r));
    if (*n_tensors > (left(r) - *n_kv * MIN_KV_BYTES) / MIN_TENSOR_INFO_BYTES)
        return BAD(r, "tensor count %llu cannot fit in the %zu bytes left", (unsigned long long)*n_tensors, left(r));
    return true;
}

static bool read_kvs(reader *r, gguf_file *f, uint64_t n_kv) {
    f->kv = calloc(n_kv ? n_kv : 1, sizeof *f->kv);
    if (!f->kv) return fail(r, GGUF_ERR_NOMEM, "out of memory for %llu metadata entries", (unsigned long long)n_kv);
    if (!index_init(r, &f->kv_index, (int64_t)n_kv)) return false;
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        const uint8_t *s;
        uint64_t len;
        uint32_t type;
        snprintf(r->ctx, sizeof r->ctx, "metadata entry %llu", (unsigned long long)i);
        if (!rd_str(r, &s, &len, "key")) return false;
        if (!(kv->key = copy_name(r, s, len, "key"))) return false;
        f->n_kv = (int64_t)i + 1; /* owns kv->key from here on, for cleanup */
        set_ctx_name(r, "metadata", kv->key);
        if (gguf_index_find(f, false, kv->key) >= 0) return BAD(r, "duplicate key");
        if (!rd_u32(r, &type, "value type")) return false;
        kv->type = (gguf_value_type)type;
        if (!read_value(r, type, 0, kv)) return false;
        gguf_index_add(&f->kv_index, gguf_hash_name(kv->key), (int64_t)i);
    }
    return true;
}

static bool read_alignment(reader *r, gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (gguf_find_key(f, "general.alignment") < 0) return true;
    snprintf(r->ctx, sizeof r->ctx, "metadata 'general.alignment'");
    r->after_read = true;
    uint32_t a;
    if (!gguf_get_u32(f, "general.alignment", &a)) return BAD(r, "must be an unsigned 32-bit integer");
    if (a == 0 || (a & (a - 1)) != 0) return BAD(r, "alignment %u is not a non-zero power of two", a);
    f->alignment = a;
    return true;
}

/* Reads one tensor info; the data offset is returned for validation once the data
 * section's start is known. */
static bool read_tensor_info(reader *r, gguf_file *f, uint64_t i, uint64_t *offset) {
    gguf_tensor *t = &f->tensors[i];
    const uint8_t *s;
    uint64_t len;
    uint32_t n_dims, type;
    snprintf(r->ctx, sizeof r->ctx, "tensor info %llu", (unsigned long long)i);
    if (!rd_str(r, &s, &len, "tensor name")) return false;
    if (!(t->name = copy_name(r, s, len, "tensor name"))) return false;
    f->n_tensors = (int64_t)i + 1;
    set_ctx_name(r, "tensor", t->name);
    if (gguf_index_find(f, true, t->name) >= 0) return BAD(r, "duplicate tensor name");
    if (!rd_u32(r, &n_dims, "n_dims")) return false;
    if (n_dims > 4) return BAD(r, "n_dims %u exceeds 4", n_dims);
    t->n_dims = n_dims;
    int64_t count = 1;
    for (uint32_t d = 0; d < 4; d++) {
        uint64_t ne = 1;
        if (d < n_dims && !rd_u64(r, &ne, "dimension")) return false;
        if (ne == 0 || ne > (uint64_t)INT64_MAX) return BAD(r, "ne[%u] = %llu is out of range", d, (unsigned long long)ne);
        if ((int64_t)ne > INT64_MAX / count) return BAD(r, "element count overflows");
        count *= (int64_t)ne;
        t->ne[d] = (int64_t)ne;
    }
    if (!rd_u32(r, &type, "type") || !rd_u64(r, offset, "data offset")) return false;
    size_t block_elems;
    const char *tname;
    if (!quant_type_info(type, &block_elems, NULL, &tname)) return BAD(r, "unknown tensor type %u", type);
    t->type = type;
    uint64_t row_bytes = quant_row_bytes(type, t->ne[0]);
    if (row_bytes == 0)
        return BAD(r, "ne[0] = %lld is not a multiple of the %s block size %zu", (long long)t->ne[0], tname, block_elems);
    uint64_t rows = (uint64_t)(count / t->ne[0]);
    if (rows > UINT64_MAX / row_bytes) return BAD(r, "byte size overflows");
    t->nbytes = rows * row_bytes;
    gguf_index_add(&f->tensor_index, gguf_hash_name(t->name), (int64_t)i);
    return true;
}

static bool place_tensor(reader *r, gguf_file *f, gguf_tensor *t, uint64_t off) {
    set_ctx_name(r, "tensor", t->name);
    if (off % f->alignment != 0) return BAD(r, "data offset %llu is not a multiple of the alignment %zu", (unsigned long long)off, f->alignment);
    uint64_t avail = f->data_offset <= r->size ? r->size - f->data_offset : 0;
    if (off > avail || t->nbytes > avail - off)
        return BAD(r, "data [%llu, +%llu) extends past the end of the file (data section has %llu bytes)",
                   (unsigned long long)off, (unsigned long long)t->nbytes, (unsigned long long)avail);
    /* general.alignment may be 1 or 2: each tensor must still start where its blocks can
     * be read in place (a misaligned block struct is undefined behaviour). */
    const uint8_t *data = r->p + f->data_offset + off;
    size_t need = quant_type_align(t->type);
    if ((uintptr_t)data % need != 0) {
        const char *tname = "?";
        quant_type_info(t->type, NULL, NULL, &tname);
        return BAD(r, "data at file offset %llu is not aligned to the %zu bytes %s needs (general.alignment %zu)",
                   (unsigned long long)(f->data_offset + off), need, tname, f->alignment);
    }
    t->data = data;
    return true;
}

static bool read_tensors(reader *r, gguf_file *f, uint64_t n) {
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    uint64_t *offsets = calloc(n ? n : 1, sizeof *offsets);
    bool ok = false;
    if (!f->tensors || !offsets) {
        fail(r, GGUF_ERR_NOMEM, "out of memory for %llu tensor infos", (unsigned long long)n);
        goto out;
    }
    r->after_read = false;
    if (!index_init(r, &f->tensor_index, (int64_t)n)) goto out;
    for (uint64_t i = 0; i < n; i++)
        if (!read_tensor_info(r, f, i, &offsets[i])) goto out;
    size_t pad = (f->alignment - r->pos % f->alignment) % f->alignment;
    f->data_offset = (uint64_t)r->pos + pad;
    r->after_read = true;
    for (uint64_t i = 0; i < n; i++)
        if (!place_tensor(r, f, &f->tensors[i], offsets[i])) goto out;
    ok = true;
out:
    free(offsets);
    return ok;
}

int gguf_parse(gguf_file *f, char *err, size_t errlen) {
    reader r = {.p = f->base, .size = f->size, .err = err, .errlen = errlen};
    uint64_t n_tensors, n_kv;
    if (err && errlen) err[0] = 0;
    if (read_header(&r, f, &n_tensors, &n_kv) && read_kvs(&r, f, n_kv) && read_alignment(&r, f) &&
        read_tensors(&r, f, n_tensors))
        return GGUF_OK;
    return r.code ? r.code : GGUF_ERR_FORMAT;
}

void gguf_free_parsed(gguf_file *f) {
    for (int64_t i = 0; i < f->n_kv; i++) {
        free(f->kv[i].key);
        free(f->kv[i].str_off);
    }
    for (int64_t i = 0; i < f->n_tensors; i++) free((char *)f->tensors[i].name);
    free(f->kv);
    free(f->tensors);
    free(f->kv_index.slots);
    free(f->tensor_index.slots);
    f->kv = NULL;
    f->tensors = NULL;
    f->kv_index.slots = f->tensor_index.slots = NULL;
    f->n_kv = f->n_tensors = 0;
}
