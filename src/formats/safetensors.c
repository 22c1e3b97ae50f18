/* safetensors parser. The header is untrusted JSON: its length is capped before anything is
 * allocated, every number is checked to be an exact non-negative integer, and every tensor's
 * byte range is checked against the data section, its shape and dtype, and the other
 * tensors' ranges before any pointer into the mapping is formed. */
#include "formats/safetensors.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err_msg.h"

#include "formats/file_map.h"
#include "formats/quant.h"

/* Integers in the header arrive as JSON numbers, which cJSON holds as doubles: anything
 * above 2^53 cannot be told from its neighbours, so it is refused rather than rounded. */
#define MAX_EXACT_INT 9007199254740992.0

struct st_file {
    file_map map;          /* st_open only */
    int64_t n;
    st_tensor *tensors;    /* sorted by name */
};

/* An untrusted name for an error line: control bytes as '?', at most 80 bytes. */
static const char *safe_name(const char *s, char buf[96]) {
    size_t i = 0;
    for (; s[i] && i < 80; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    strcpy(buf + i, s[i] ? "..." : "");
    return buf;
}

static bool exact_u64(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double v = j->valuedouble;
    if (!(v >= 0.0 && v <= MAX_EXACT_INT) || v != (double)(uint64_t)v) return false;
    *out = (uint64_t)v;
    return true;
}

static bool dtype_of(const char *s, uint32_t *type) {
    if (!strcmp(s, "F32")) *type = INVAR_T_F32;
    else if (!strcmp(s, "F16")) *type = INVAR_T_F16;
    else if (!strcmp(s, "BF16")) *type = INVAR_T_BF16;
    else return false;
    return true;
}

typedef struct {
    const uint8_t *data;   /* start of the data section */
    uint64_t data_len;
    char *err;
    size_t errlen;
} section;

/* Offsets of tensor i, kept for the overlap check. */
typedef struct {
    uint64_t begin, end;
    int64_t i;
} range;

static int parse_entry(const section *s, const cJSON *e, st_tensor *t, range *r) {
    char nb[96];
    const char *nm = safe_name(e->string, nb);
    if (!cJSON_IsObject(e))
        return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen, "tensor '%s': entry is not an object", nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
        return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen,
                             "tensor '%s': needs a string dtype, a shape array and a data_offsets array", nm);
    if (!dtype_of(dt->valuestring, &t->type)) {
        char db[96];
        return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen,
                             "tensor '%s': dtype '%s' is not supported (F32, F16, BF16)", nm,
                             safe_name(dt->valuestring, db));
    }
    int nd = cJSON_GetArraySize(sh);
    if (nd > ST_MAX_DIMS)
        return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen, "tensor '%s': %d dimensions (at most %d)", nm, nd,
                             ST_MAX_DIMS);
    t->n_dims = (uint32_t)nd;
    uint64_t elems = 1;
    int d = 0;
    for (const cJSON *x = sh->child; x; x = x->next, d++) {
        uint64_t v;
        if (!exact_u64(x, &v))
            return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen,
                                 "tensor '%s': shape[%d] is not a non-negative integer", nm, d);
        if (__builtin_mul_overflow(elems, v, &elems))
            return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen, "tensor '%s': element count overflows", nm);
        t->shape[d] = (int64_t)v;
    }
    size_t esize = t->type == INVAR_T_F32 ? 4 : 2;
    uint64_t nbytes;
    if (__builtin_mul_overflow(elems, (uint64_t)esize, &nbytes))
        return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen, "tensor '%s': byte size overflows", nm);
    uint64_t b, en;
    if (cJSON_GetArraySize(off) != 2 || !exact_u64(off->child, &b) || !exact_u64(off->child->next, &en))
        return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen,
                             "tensor '%s': data_offsets must be two non-negative integers", nm);
    if (b > en || en > s->data_len)
        return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen,
                             "tensor '%s': data_offsets [%llu, %llu] are outside the %llu-byte data section", nm,
                             (unsigned long long)b, (unsigned long long)en, (unsigned long long)s->data_len);
    if (en - b != nbytes)
        return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen,
                             "tensor '%s': data_offsets span %llu bytes but shape x %s needs %llu", nm,
                             (unsigned long long)(en - b), dt->valuestring, (unsigned long long)nbytes);
    t->data = s->data + b;
    t->nbytes = nbytes;
    if (nbytes && (uintptr_t)t->data % quant_type_align(t->type)) /* an empty tensor is never read */
        return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen, "tensor '%s': data at offset %llu is not aligned for %s",
                             nm, (unsigned long long)b, dt->valuestring);
    t->name = strdup(e->string);
    if (!t->name) return ST_ERR_NOMEM;
    r->begin = b;
    r->end = en;
    return ST_OK;
}

static int check_metadata(const section *s, const cJSON *m) {
    if (!cJSON_IsObject(m)) return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen, "__metadata__ is not an object");
    for (const cJSON *x = m->child; x; x = x->next)
        if (!cJSON_IsString(x)) {
            char nb[96];
            return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen, "__metadata__ '%s' is not a string",
                                 safe_name(x->string, nb));
        }
    return ST_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_range(const void *pa, const void *pb) {
    const range *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    return a->end < b->end ? -1 : (a->end > b->end);
}

static int check_ranges(const section *s, const st_file *f, range *r) {
    qsort(r, (size_t)f->n, sizeof *r, cmp_range);
    uint64_t reach = 0; /* furthest end so far */
    int64_t who = -1;
    for (int64_t k = 0; k < f->n; k++) {
        if (r[k].begin == r[k].end) continue; /* empty tensors occupy nothing */
        if (who >= 0 && r[k].begin < reach) {
            char b1[96], b2[96];
            return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen,
                                 "tensors '%s' and '%s' have overlapping data_offsets",
                                 safe_name(f->tensors[who].name, b1), safe_name(f->tensors[r[k].i].name, b2));
        }
        reach = r[k].end;
        who = r[k].i;
    }
    return ST_OK;
}

static int parse_header(st_file *f, const cJSON *root, const section *s) {
    if (!cJSON_IsObject(root)) return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen, "header is not a JSON object");
    int64_t n = 0;
    for (const cJSON *e = root->child; e; e = e->next)
        if (strcmp(e->string, "__metadata__")) n++;
    f->tensors = calloc((size_t)(n ? n : 1), sizeof *f->tensors);
    range *r = calloc((size_t)(n ? n : 1), sizeof *r);
    if (!f->tensors || !r) {
        free(r);
        return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen, "out of memory");
    }
    int rc = ST_OK;
    for (const cJSON *e = root->child; e && rc == ST_OK; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            rc = check_metadata(s, e);
            continue;
        }
        r[f->n].i = f->n;
        rc = parse_entry(s, e, &f->tensors[f->n], &r[f->n]);
        if (rc == ST_OK) f->n++;
    }
    if (rc == ST_OK) rc = check_ranges(s, f, r);
    free(r);
    if (rc != ST_OK) return rc == ST_ERR_NOMEM ? err_fail_code(ST_ERR_FORMAT, s->err, s->errlen, "out of memory") : rc;
    qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_name);
    for (int64_t k = 1; k < f->n; k++)
        if (!strcmp(f->tensors[k - 1].name, f->tensors[k].name)) {
            char nb[96];
            return err_fail_code(ST_ERR_FORMAT, s->err, s->errlen, "tensor '%s' appears twice",
                                 safe_name(f->tensors[k].name, nb));
        }
    return ST_OK;
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int parse(st_file *f, const uint8_t *base, size_t size, char *err, size_t errlen) {
    if (size < 8)
        return err_fail_code(ST_ERR_FORMAT, err, errlen, "%zu bytes is too small for a safetensors file", size);
    uint64_t hlen = le64(base);
    if (hlen > ST_MAX_HEADER)
        return err_fail_code(ST_ERR_FORMAT, err, errlen, "header length %llu exceeds the %llu-byte limit",
                             (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    if (hlen > size - 8)
        return err_fail_code(ST_ERR_FORMAT, err, errlen, "header length %llu runs past the end of the %zu-byte file",
                             (unsigned long long)hlen, size);
    if (hlen < 2 || base[8] != '{')
        return err_fail_code(ST_ERR_FORMAT, err, errlen, "header does not start with a JSON object");
    /* A NUL-terminated copy: the parser never reads past it, whatever the bytes are. */
    char *text = malloc((size_t)hlen + 1);
    if (!text)
        return err_fail_code(ST_ERR_FORMAT, err, errlen, "out of memory for a %llu-byte header",
                             (unsigned long long)hlen);
    memcpy(text, base + 8, (size_t)hlen);
    text[hlen] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &end, 0);
    int rc = ST_OK;
    if (!root) {
        rc = err_fail_code(ST_ERR_FORMAT, err, errlen, "header is not valid JSON (at byte %lld)",
                           end ? (long long)(end - text) : -1LL);
    } else {
        /* The writer pads the header with spaces; anything else after the object is refused. */
        for (size_t at = end ? (size_t)(end - text) : (size_t)hlen; at < hlen && rc == ST_OK; at++)
            if (text[at] != ' ' && text[at] != '\t' && text[at] != '\n' && text[at] != '\r')
                rc = err_fail_code(ST_ERR_FORMAT, err, errlen, "header has bytes after its JSON object (at byte %zu)",
                                   at);
    }
    if (rc == ST_OK) {
        section s = {base + 8 + hlen, size - 8 - hlen, err, errlen};
        rc = parse_header(f, root, &s);
    }
    cJSON_Delete(root);
    free(text);
    return rc;
}

static int open_parsed(st_file *f, const uint8_t *base, size_t size, st_file **out, char *err, size_t errlen) {
    int rc = parse(f, base, size, err, errlen);
    if (rc != ST_OK) {
        st_close(f);
        return rc;
    }
    *out = f;
    return ST_OK;
}

int st_open_memory(const void *data, size_t size, st_file **out, char *err, size_t errlen) {
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f) {
        err_fail_code(ST_ERR_FORMAT, err, errlen, "out of memory");
        return ST_ERR_NOMEM;
    }
    return open_parsed(f, data, data ? size : 0, out, err, errlen);
}

int st_open(const char *path, st_file **out, char *err, size_t errlen) {
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f) {
        err_fail_code(ST_ERR_FORMAT, err, errlen, "out of memory");
        return ST_ERR_NOMEM;
    }
    if (file_map_open(path, 1, &f->map, err, errlen)) {
        free(f);
        return ST_ERR_IO;
    }
    char msg[384];
    int rc = open_parsed(f, f->map.base, f->map.size, out, msg, sizeof msg);
    if (rc != ST_OK) err_fail_code(ST_ERR_FORMAT, err, errlen, "%s: %s", path, msg);
    return rc;
}

void st_close(st_file *f) {
    if (!f) return;
    if (f->tensors)
        for (int64_t i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    free(f->tensors);
    file_map_close(&f->map);
    free(f);
}

int64_t st_n_tensors(const st_file *f) { return f->n; }

const st_tensor *st_get_tensor(const st_file *f, int64_t i) {
    return i >= 0 && i < f->n ? &f->tensors[i] : NULL;
}

const st_tensor *st_find_tensor(const st_file *f, const char *name) {
    st_tensor key = {.name = name};
    return bsearch(&key, f->tensors, (size_t)f->n, sizeof key, cmp_name);
}
