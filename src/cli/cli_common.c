#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/clock.h"

static char g_path[4096];

const char *cli_model_path(const char *opt) {
    if (opt) return opt;
    const char *env = getenv("INVAR_MODEL");
    if (env && *env) return env;
    snprintf(g_path, sizeof g_path, "models/%s", DEFAULT_MODEL_NAME);
    if (access(g_path, R_OK) == 0) return g_path;
    /* Beside the binary: <repo>/build/invar -> <repo>/models/ */
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(g_path, sizeof g_path, "%s/../models/%s", exe, DEFAULT_MODEL_NAME);
            if (access(g_path, R_OK) == 0) return g_path;
        }
    }
    snprintf(g_path, sizeof g_path, "models/%s", DEFAULT_MODEL_NAME);
    return g_path;
}

invar_model *cli_load_model(const char *opt_path) {
    const char *path = cli_model_path(opt_path);
    char err[512];
    invar_model *m = NULL;
    if (invar_model_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "invar: cannot load model '%s': %s\n", path, err);
        if (!opt_path) fprintf(stderr, "invar: run scripts/setup.sh to fetch the default model, or pass --model PATH\n");
        return NULL;
    }
    return m;
}

bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

bool parse_f32(const char *s, float *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* --device cpu|cuda, --cuda-gemm invariant|cublas and --cuda-graphs on|off. */
static int device_opt(invar_engine_config *c, const char *name, const char *val) {
    if (!strcmp(name, "device")) {
        if (val && !strcmp(val, "cpu")) c->device = INVAR_DEVICE_CPU;
        else if (val && !strcmp(val, "cuda")) c->device = INVAR_DEVICE_CUDA;
        else return fprintf(stderr, "invar: --device needs cpu or cuda\n"), -1;
        return 1;
    }
    if (!strcmp(name, "cuda-gemm")) {
        if (val && !strcmp(val, "invariant")) c->cuda_gemm_cublas = false;
        else if (val && !strcmp(val, "cublas")) c->cuda_gemm_cublas = true;
        else return fprintf(stderr, "invar: --cuda-gemm needs invariant or cublas\n"), -1;
        return 1;
    }
    if (!strcmp(name, "cuda-graphs")) {
        if (val && !strcmp(val, "on")) c->cuda_no_graphs = false;
        else if (val && !strcmp(val, "off")) c->cuda_no_graphs = true;
        else return fprintf(stderr, "invar: --cuda-graphs needs on or off\n"), -1;
        return 1;
    }
    return 0;
}

/* --kv-type f32|f16. */
static int kv_type_opt(invar_engine_config *c, const char *name, const char *val) {
    if (strcmp(name, "kv-type")) return 0;
    if (val && !strcmp(val, "f32")) c->kv_type = INVAR_KV_F32;
    else if (val && !strcmp(val, "f16")) c->kv_type = INVAR_KV_F16;
    else return fprintf(stderr, "invar: --kv-type needs f32 or f16, got '%s'\n", val ? val : ""), -1;
    return 1;
}

int cli_engine_opt(invar_engine_config *c, const char *name, const char *val) {
    int d = device_opt(c, name, val);
    if (!d) d = kv_type_opt(c, name, val);
    if (d) return d;
    int64_t v;
    struct { const char *name; int64_t lo, hi; } opts[] = {
        {"threads", 1, 256}, {"max-batch", 1, 4096}, {"max-batch-tokens", 1, 1 << 20},
        {"n-ctx", 1, 1 << 24}, {"kv-mem-mb", 1, 1 << 24}, {"cuda-device", 0, 1023}};
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++) {
        if (strcmp(name, opts[i].name)) continue;
        if (!parse_i64(val, opts[i].lo, opts[i].hi, &v)) {
            fprintf(stderr, "invar: --%s needs an integer in [%lld, %lld]\n", name, (long long)opts[i].lo,
                    (long long)opts[i].hi);
            return -1;
        }
        switch (i) {
        case 0: c->n_threads = (int32_t)v; break;
        case 1: c->max_batch = (int32_t)v; break;
        case 2: c->max_batch_tokens = (int32_t)v; break;
        case 3: c->n_ctx = (int32_t)v; break;
        case 4: c->kv_mem_mb = v; break;
        default: c->cuda_device = (int32_t)v; break;
        }
        return 1;
    }
    return 0;
}

int cli_finish_output(FILE *f, const char *cmd, const char *name) {
    errno = 0;
    bool bad = fflush(f) != 0 || ferror(f);
    int saved = errno;
    if (f != stdout && fclose(f) != 0 && !bad) {
        bad = true;
        saved = errno;
    }
    if (!bad) return 0;
    fprintf(stderr, "invar %s: cannot write %s: %s\n", cmd, name, saved ? strerror(saved) : "write error");
    return -1;
}

void progress_start(progress *p, int64_t total) {
    p->on = isatty(2) && total > 1;
    p->total = total;
    p->t0 = now_seconds();
}

void progress_update(progress *p, int64_t done, int64_t tokens) {
    if (!p->on) return;
    int width = 30, fill = (int)(width * done / (p->total ? p->total : 1));
    double dt = now_seconds() - p->t0;
    fprintf(stderr, "\r[%.*s%*s] %lld/%lld requests  %.1f tok/s ", fill, "##############################",
            width - fill, "", (long long)done, (long long)p->total, dt > 0 ? (double)tokens / dt : 0.0);
    fflush(stderr);
}

void progress_end(progress *p) {
    if (p->on) fputs("\n", stderr);
}
