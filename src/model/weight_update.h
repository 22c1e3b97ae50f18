/* Replacing a loaded model's weights in place (new weights from a trainer, or a file).
 *
 * A tensor is named as in GGUF ("blk.3.ffn_up.weight") and must have the shape of the one it
 * replaces; its type may differ (any type the model can compute with: F32, F16 and BF16
 * weights from a trainer, or a quantised type from a file). The data is copied. The model
 * computes afterwards exactly as if it had been loaded from a file holding those tensors.
 * rope_freqs.weight is not replaceable (the RoPE table is built from it at load). */
#ifndef INVAR_MODEL_WEIGHT_UPDATE_H
#define INVAR_MODEL_WEIGHT_UPDATE_H
#include <stddef.h>
#include "formats/gguf.h"
#include "model/model.h"

/* Replaces n tensors (name, type, shape and data as in gguf_tensor; data need not outlive
 * the call). All or nothing: every tensor is checked and its new form prepared before any
 * is swapped in; on an error the model is unchanged. Not thread-safe against a forward pass
 * on the same model: the caller holds whatever lock its users run under. */
int model_update_weights(model *m, const gguf_tensor *ts, size_t n, char *err, size_t errlen);
/* Replaces every weight the model computes with by the tensor of that name in f (which must
 * hold them all; its other tensors are ignored). */
int model_update_weights_from_gguf(model *m, const gguf_file *f, char *err, size_t errlen);

#endif
