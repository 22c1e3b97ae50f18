/* safetensors container parser (Hugging Face weights): mmap'd, bounds-checked, never
 * trusts the file. Layout: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 * "__metadata__": {...}}, then the data section the offsets index. */
#ifndef INVAR_SAFETENSORS_H
#define INVAR_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

/* The header is JSON held in memory while parsing: capped like the reference
 * implementation's (100 MB), and never more than the file holds. */
#define ST_MAX_HEADER 100000000ull
#define ST_MAX_DIMS 8

typedef struct {
    const char *name;             /* NUL-terminated copy owned by the st_file */
    uint32_t type;                /* INVAR_T_F32, INVAR_T_F16 or INVAR_T_BF16 (quant.h) */
    uint32_t n_dims;              /* 0 for a scalar */
    int64_t shape[ST_MAX_DIMS];   /* outermost first; shape[n_dims-1] is contiguous */
    const void *data;             /* inside the mapping, aligned for its type */
    uint64_t nbytes;              /* == product(shape) * element size */
} st_tensor;

typedef struct st_file st_file;

enum { ST_OK = 0, ST_ERR_IO = 1, ST_ERR_FORMAT = 2, ST_ERR_NOMEM = 3 };

/* 0 on success; else an ST_ERR_* code and a one-line message in err. Refused: a header
 * length over ST_MAX_HEADER or the file, a header that is not one JSON object, an entry
 * without a valid dtype / shape / data_offsets, a dtype other than F32/F16/BF16, offsets
 * outside the data section or whose range does not match shape x dtype, ranges that
 * overlap, duplicate names, data not aligned for its type. */
int st_open(const char *path, st_file **out, char *err, size_t errlen);
/* Parses a caller-owned buffer (no copy; it must outlive the st_file). For fuzzing/tests. */
int st_open_memory(const void *data, size_t size, st_file **out, char *err, size_t errlen);
void st_close(st_file *f);

int64_t st_n_tensors(const st_file *f);
const st_tensor *st_get_tensor(const st_file *f, int64_t i);       /* sorted by name */
const st_tensor *st_find_tensor(const st_file *f, const char *name); /* NULL if absent */

#endif
