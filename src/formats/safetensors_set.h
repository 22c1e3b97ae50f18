/* The weights of a Hugging Face model directory: model.safetensors, or the shards that
 * model.safetensors.index.json names (each mmap'd), as one name space. */
#ifndef INVAR_SAFETENSORS_SET_H
#define INVAR_SAFETENSORS_SET_H
#include <stddef.h>
#include <stdint.h>

#include "formats/safetensors.h"

typedef struct st_set st_set;

/* 0, or -1 with a one-line message. With an index, every tensor must be in exactly the
 * shard the index names and every shard tensor in the index; shard names are plain file
 * names of the directory ending in .safetensors. */
int st_set_open(const char *dir, st_set **out, char *err, size_t errlen);
void st_set_close(st_set *s);

int64_t st_set_n_tensors(const st_set *s);
const st_tensor *st_set_tensor(const st_set *s, int64_t i);           /* sorted by name */
const st_tensor *st_set_find(const st_set *s, const char *name);      /* NULL if absent */

#endif
