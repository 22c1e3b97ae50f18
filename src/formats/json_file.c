#include "formats/json_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/file_map.h"

cJSON *json_file_read(const char *path, size_t max_bytes, bool *absent, char *err, size_t errlen) {
    if (absent) *absent = false;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (absent && errno == ENOENT) *absent = true;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (S_ISREG(st.st_mode) && (unsigned long long)st.st_size > max_bytes) {
        snprintf(err, errlen, "%s: %lld bytes is more than the %zu this file may have", path, (long long)st.st_size,
                 max_bytes);
        return NULL;
    }
    file_map m;
    if (file_map_open(path, 1, &m, err, errlen)) return NULL;
    if (m.size > max_bytes) { /* changed since the stat */
        snprintf(err, errlen, "%s: file too large", path);
        file_map_close(&m);
        return NULL;
    }
    /* A NUL-terminated copy: the parser never reads past it, whatever the bytes are. */
    char *text = malloc(m.size + 1);
    if (!text) {
        snprintf(err, errlen, "%s: out of memory", path);
        file_map_close(&m);
        return NULL;
    }
    memcpy(text, m.base, m.size);
    text[m.size] = 0;
    size_t size = m.size;
    file_map_close(&m);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, size, &end, 0);
    if (!root) snprintf(err, errlen, "%s: not valid JSON (at byte %lld)", path, end ? (long long)(end - text) : -1LL);
    free(text);
    return root;
}

bool json_exact_int(const cJSON *j, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double v = j->valuedouble;
    /* |v| <= 2^53: every such integer is exact, and the cast cannot overflow. */
    if (!(v >= -9007199254740992.0 && v <= 9007199254740992.0) || v != (double)(int64_t)v) return false;
    int64_t i = (int64_t)v;
    if (i < lo || i > hi) return false;
    *out = i;
    return true;
}
