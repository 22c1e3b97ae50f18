/* Read-only mmap of a whole regular file (model weights are never copied). */
#ifndef INVAR_FILE_MAP_H
#define INVAR_FILE_MAP_H
#include <stddef.h>

typedef struct {
    void *base;
    size_t size;
} file_map;

/* Maps path; refuses what is not a regular file of at least min_size bytes (min_size >= 1:
 * an empty file cannot be mapped). 0, or -1 with "path: reason" in err. */
int file_map_open(const char *path, size_t min_size, file_map *m, char *err, size_t errlen);
void file_map_close(file_map *m);

#endif
