#include "bench_cuda.h"
void bench_attention(FILE *js) { (void)js; }
