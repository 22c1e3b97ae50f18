/* GGUF container parser: mmap'd, bounds-checked, never trusts the file.
 * All lookups return false/NULL on absence or type mismatch; nothing here aborts. */
#ifndef INVAR_GGUF_H
#define INVAR_GGUF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    GGUF_T_UINT8 = 0, GGUF_T_INT8 = 1, GGUF_T_UINT16 = 2, GGUF_T_INT16 = 3,
    GGUF_T_UINT32 = 4, GGUF_T_INT32 = 5, GGUF_T_FLOAT32 = 6, GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8, GGUF_T_ARRAY = 9, GGUF_T_UINT64 = 10, GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12
} gguf_value_type;

typedef struct {
    const char *name;      /* NUL-terminated copy owned by the gguf_file */
    uint32_t n_dims;
    int64_t ne[4];         /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint32_t type;         /* ggml type id, see quant.h */
    const void *data;      /* points into the mapping; validated to lie inside it */
    uint64_t nbytes;
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Return codes of gguf_open / gguf_open_memory. */
enum { GGUF_OK = 0, GGUF_ERR_IO = 1, GGUF_ERR_FORMAT = 2, GGUF_ERR_NOMEM = 3 };

/* Returns 0 on success; on failure a non-zero code and a one-line message in err. */
int gguf_open(const char *path, gguf_file **out, char *err, size_t errlen);
/* Parses a caller-owned buffer (no copy; buffer must outlive the gguf_file). For fuzzing/tests. */
int gguf_open_memory(const void *data, size_t size, gguf_file **out, char *err, size_t errlen);
void gguf_close(gguf_file *f);

uint32_t gguf_version(const gguf_file *f);
size_t gguf_alignment(const gguf_file *f);

/* Metadata. Integer getters accept any integer type whose value fits the target. */
int64_t gguf_n_kv(const gguf_file *f);
const char *gguf_kv_key(const gguf_file *f, int64_t i);
int64_t gguf_find_key(const gguf_file *f, const char *key); /* -1 if absent */
gguf_value_type gguf_kv_type(const gguf_file *f, int64_t i); /* (gguf_value_type)-1 if i is out of range */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out); /* accepts f32 or f64 */
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
/* Strings are not NUL-terminated in the file: (ptr,len) into the mapping. */
bool gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len);
/* Arrays: element type and count. Arrays of arrays are validated but their elements are
 * not exposed (elem = GGUF_T_ARRAY; gguf_get_arr_data returns NULL for them and strings). */
bool gguf_get_arr_info(const gguf_file *f, const char *key, gguf_value_type *elem, uint64_t *n);
/* i-th string of a string array (O(1): the parser indexes offsets). */
bool gguf_get_arr_str(const gguf_file *f, const char *key, uint64_t i, const char **s, size_t *len);
/* Raw pointer to a numeric array's packed little-endian data (may be unaligned: memcpy). */
const void *gguf_get_arr_data(const gguf_file *f, const char *key);

/* Name of a metadata value type ("u32", "string", ...); "?" for unknown ids. */
const char *gguf_type_name(gguf_value_type t);
/* File offset where the tensor data section starts (aligned). */
uint64_t gguf_data_offset(const gguf_file *f);

/* Tensors. */
int64_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_get_tensor(const gguf_file *f, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name); /* NULL if absent */

#endif
