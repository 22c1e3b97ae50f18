/* Hooks for tests only (negative controls). Not part of the public API. */
#ifndef INVAR_ENGINE_TESTING_H
#define INVAR_ENGINE_TESTING_H
#include "../model/forward.h"
#include "invar.h"

void invar_engine_testing_set_matmul(invar_engine *e, matmul_fn fn);

#endif
