#include "formats/file_map.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int file_map_open(const char *path, size_t min_size, file_map *m, char *err, size_t errlen) {
    m->base = NULL;
    m->size = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before fstat can reject it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if ((unsigned long long)st.st_size < (unsigned long long)(min_size ? min_size : 1)) {
        snprintf(err, errlen, "%s: file of %lld bytes is too small", path, (long long)st.st_size);
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); /* the mapping stays valid */
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "%s: cannot mmap: %s", path, strerror(errno));
        return -1;
    }
    m->base = p;
    m->size = (size_t)st.st_size;
    return 0;
}

void file_map_close(file_map *m) {
    if (m->base) munmap(m->base, m->size);
    m->base = NULL;
    m->size = 0;
}
