/* Opening a GGUF: mmap a file read-only (tensor data is never copied) or wrap a
 * caller buffer. */
#include "formats/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int open_parsed(gguf_file *f, gguf_file **out, char *err, size_t errlen) {
    int rc = gguf_parse(f, err, errlen);
    if (rc != GGUF_OK) {
        gguf_close(f);
        return rc;
    }
    *out = f;
    return GGUF_OK;
}

int gguf_open_memory(const void *data, size_t size, gguf_file **out, char *err, size_t errlen) {
    *out = NULL;
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return GGUF_ERR_NOMEM;
    }
    f->base = data;
    f->size = data ? size : 0;
    return open_parsed(f, out, err, errlen);
}

static int io_error(const char *path, const char *what, char *err, size_t errlen) {
    if (err && errlen) snprintf(err, errlen, "%s: %s: %s", path, what, strerror(errno));
    return GGUF_ERR_IO;
}

static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "of an unknown type";
}

int gguf_open(const char *path, gguf_file **out, char *err, size_t errlen) {
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before fstat can reject it.
     * It changes nothing for the regular files that pass (they are only mmap'd). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return io_error(path, "cannot open", err, errlen);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = io_error(path, "cannot stat", err, errlen);
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 4) {
        close(fd);
        if (err && errlen) {
            if (!S_ISREG(st.st_mode))
                snprintf(err, errlen, "%s: is %s, not a regular file (a GGUF model is mmap'd)", path,
                         file_kind(st.st_mode));
            else
                snprintf(err, errlen, "%s: file of %lld bytes is too small to be GGUF", path, (long long)st.st_size);
        }
        return GGUF_ERR_FORMAT;
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); /* the mapping stays valid */
    if (map == MAP_FAILED) return io_error(path, "cannot mmap", err, errlen);
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        munmap(map, size);
        if (err && errlen) snprintf(err, errlen, "%s: out of memory", path);
        return GGUF_ERR_NOMEM;
    }
    f->base = map;
    f->size = size;
    f->map = map;
    char msg[384];
    int rc = open_parsed(f, out, msg, sizeof msg);
    if (rc != GGUF_OK && err && errlen) snprintf(err, errlen, "%s: %s", path, msg);
    return rc;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    gguf_free_parsed(f);
    if (f->map) munmap(f->map, f->size);
    free(f);
}
