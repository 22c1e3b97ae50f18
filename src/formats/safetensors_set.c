#include "formats/safetensors_set.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err_msg.h"
#include "formats/json_file.h"

#define MAX_INDEX_BYTES (64u << 20)
#define MAX_SHARD_NAME 255

struct st_set {
    int64_t n_shards;
    st_file **shards;
    int64_t n;
    const st_tensor **all;   /* every shard's tensors, sorted by name */
};

static int cmp_tensor_ptr(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard name the index may use: a file of this directory, never a path out of it. */
static bool plain_shard_name(const char *s) {
    size_t n = strlen(s);
    const char *ext = ".safetensors";
    size_t el = strlen(ext);
    if (n <= el || n > MAX_SHARD_NAME || s[0] == '.' || strchr(s, '/') || strcmp(s + n - el, ext)) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20) return false;
    return true;
}

static int open_shard(st_set *s, const char *dir, const char *name, char *err, size_t errlen) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return err_fail(err, errlen, "%s: path too long", dir);
    if (st_open(path, &s->shards[s->n_shards], err, errlen)) return -1;
    s->n_shards++;
    return 0;
}

/* Merges the shards' tensors into one sorted list; a name in two shards is an error. */
static int merge(st_set *s, char *err, size_t errlen) {
    int64_t total = 0;
    for (int64_t k = 0; k < s->n_shards; k++) total += st_n_tensors(s->shards[k]);
    s->all = malloc((size_t)(total ? total : 1) * sizeof *s->all);
    if (!s->all) return err_fail(err, errlen, "out of memory");
    for (int64_t k = 0; k < s->n_shards; k++)
        for (int64_t i = 0; i < st_n_tensors(s->shards[k]); i++) s->all[s->n++] = st_get_tensor(s->shards[k], i);
    qsort(s->all, (size_t)s->n, sizeof *s->all, cmp_tensor_ptr);
    for (int64_t i = 1; i < s->n; i++)
        if (!strcmp(s->all[i - 1]->name, s->all[i]->name))
            return err_fail(err, errlen, "tensor '%.80s' is in two shards", s->all[i]->name);
    return 0;
}

/* Shard k holds tensor t? */
static bool in_shard(const st_set *s, int64_t k, const st_tensor *t) {
    return st_find_tensor(s->shards[k], t->name) == t;
}

static int open_index(st_set *s, const char *dir, const cJSON *root, const char *ipath, char *err, size_t errlen) {
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) return err_fail(err, errlen, "%s: no weight_map object", ipath);
    int64_t n = cJSON_GetArraySize(wm);
    const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
    if (!names) return err_fail(err, errlen, "out of memory");
    int64_t k = 0;
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !plain_shard_name(e->valuestring)) {
            free(names);
            return err_fail(err, errlen,
                            "%s: weight_map entry '%.80s' does not name a .safetensors file of the directory", ipath,
                            e->string);
        }
        names[k++] = e->valuestring;
    }
    qsort(names, (size_t)k, sizeof *names, cmp_str_ptr);
    int64_t u = 0; /* distinct shard names, in order */
    for (int64_t i = 0; i < k; i++)
        if (u == 0 || strcmp(names[u - 1], names[i])) names[u++] = names[i];
    s->shards = calloc((size_t)(u ? u : 1), sizeof *s->shards);
    int rc = s->shards ? 0 : err_fail(err, errlen, "out of memory");
    for (int64_t i = 0; i < u && rc == 0; i++) rc = open_shard(s, dir, names[i], err, errlen);
    if (rc == 0) rc = merge(s, err, errlen);
    /* The index and the shards agree exactly: each listed tensor is in its shard... */
    for (const cJSON *e = wm->child; e && rc == 0; e = e->next) {
        const st_tensor *t = st_set_find(s, e->string);
        const char **at = bsearch(&e->valuestring, names, (size_t)u, sizeof *names, cmp_str_ptr);
        if (!t || !at || !in_shard(s, at - names, t))
            rc = err_fail(err, errlen, "%s: tensor '%.80s' is not in %s", ipath, e->string, e->valuestring);
    }
    /* ...and none is left out of the index. */
    if (rc == 0 && s->n != n)
        rc = err_fail(err, errlen, "%s: the shards hold %lld tensors, the index lists %lld", ipath, (long long)s->n,
                      (long long)n);
    free(names);
    return rc;
}

int st_set_open(const char *dir, st_set **out, char *err, size_t errlen) {
    *out = NULL;
    st_set *s = calloc(1, sizeof *s);
    if (!s) return err_fail(err, errlen, "out of memory");
    char ipath[4096];
    if ((size_t)snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir) >= sizeof ipath) {
        free(s);
        return err_fail(err, errlen, "%s: path too long", dir);
    }
    bool absent;
    cJSON *index = json_file_read(ipath, MAX_INDEX_BYTES, &absent, err, errlen);
    int rc;
    if (index) {
        rc = open_index(s, dir, index, ipath, err, errlen);
        cJSON_Delete(index);
    } else if (absent) {
        s->shards = calloc(1, sizeof *s->shards);
        rc = s->shards ? open_shard(s, dir, "model.safetensors", err, errlen) : err_fail(err, errlen, "out of memory");
        if (rc == 0) rc = merge(s, err, errlen);
    } else {
        rc = -1;
    }
    if (rc) {
        st_set_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

void st_set_close(st_set *s) {
    if (!s) return;
    for (int64_t k = 0; k < s->n_shards; k++) st_close(s->shards[k]);
    free(s->shards);
    free(s->all);
    free(s);
}

int64_t st_set_n_tensors(const st_set *s) { return s->n; }

const st_tensor *st_set_tensor(const st_set *s, int64_t i) { return i >= 0 && i < s->n ? s->all[i] : NULL; }

const st_tensor *st_set_find(const st_set *s, const char *name) {
    st_tensor key = {.name = name};
    const st_tensor *kp = &key;
    const st_tensor **at = bsearch(&kp, s->all, (size_t)s->n, sizeof *s->all, cmp_tensor_ptr);
    return at ? *at : NULL;
}
