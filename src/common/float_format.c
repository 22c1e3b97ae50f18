#include "common/float_format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void format_f32(char *buf, size_t cap, float v) {
    if (!isfinite(v)) {
        snprintf(buf, cap, v < 0 ? "-1e309" : "1e309"); /* JSON has no inf: read back as +-inf */
        return;
    }
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, cap, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}
