/* Private layout of a parsed GGUF file, shared by the parser and the getters. */
#ifndef INVAR_GGUF_INTERNAL_H
#define INVAR_GGUF_INTERNAL_H
#include "formats/gguf.h"

typedef struct {
    char *key;                /* NUL-terminated copy (keys with NUL bytes are rejected) */
    gguf_value_type type;
    const uint8_t *val;       /* scalar bytes, string bytes, or first array element */
    uint64_t n;               /* string length, or array element count */
    gguf_value_type elem;     /* arrays only */
    uint64_t *str_off;        /* string arrays: file offset of each element's length prefix */
} gguf_kv;

/* Open-addressing table of (index + 1); 0 marks an empty slot. */
typedef struct {
    int64_t *slots;
    size_t mask;
} gguf_index;

struct gguf_file {
    const uint8_t *base;
    size_t size;
    void *map;                /* non-NULL when gguf_open owns an mmap of base */
    uint32_t version;
    size_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    gguf_kv *kv;
    int64_t n_tensors;
    gguf_tensor *tensors;
    gguf_index kv_index, tensor_index;
};

/* Parses base[0..size) into f (base/size/map already set). 0 or a GGUF_ERR_* code. */
int gguf_parse(gguf_file *f, char *err, size_t errlen);
/* Frees what gguf_parse allocated (not the mapping, not f). */
void gguf_free_parsed(gguf_file *f);

/* Name -> index tables for metadata keys (tensors=false) and tensor names. */
uint64_t gguf_hash_name(const char *s);
int64_t gguf_index_find(const gguf_file *f, bool tensors, const char *name); /* -1 if absent */
void gguf_index_add(gguf_index *ix, uint64_t hash, int64_t idx);              /* name known absent */

#endif
