#ifndef INVAR_ENGINE_INTERNAL_H
#define INVAR_ENGINE_INTERNAL_H
#include "../model/model.h"

struct invar_model {
    model *m;
};

#endif
