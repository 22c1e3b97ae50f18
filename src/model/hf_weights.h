/* The weights of a Hugging Face directory as the tensor views the model loader reads from a
 * GGUF: GGUF names ("blk.3.attn_q.weight"), ne[] innermost first, data in the mapping. */
#ifndef INVAR_HF_WEIGHTS_H
#define INVAR_HF_WEIGHTS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "formats/gguf.h"
#include "model/config.h"

typedef struct hf_weights hf_weights;

/* Opens dir's safetensors and maps every tensor to its GGUF name. A tensor with no place in
 * c's architecture is an error (it would be silently ignored otherwise: e.g. o_proj.bias);
 * rotary inv_freq buffers are skipped. Llama's q/k projections are copied with their rows
 * in GGUF's order (HF keeps each head's rotary halves apart, GGUF interleaves them), so the
 * forward pass and its bits are those of the GGUF conversion. tied: lm_head.weight, if
 * present, is not used (the embedding is); untied: it is required. deepseek_v2/v3 (deepseek2):
 * MLA's tensors keep their layout (kv_b_proj is the merged attn_kv_b; the rope rows are
 * already in GGUF's pair order), the routed layers' e_score_correction_bias is required for
 * V3 (sigmoid gating) and has no place in V2 (softmax, transformers would not read it), and
 * the multi-token-prediction layers stored after the last (hf_mtp_layers) are skipped. */
int hf_weights_open(const char *dir, const model_config *c, bool tied, hf_weights **out, char *err, size_t errlen);
void hf_weights_close(hf_weights *w);
const gguf_tensor *hf_weights_find(const hf_weights *w, const char *gguf_name); /* NULL if absent */
/* The Hugging Face name of a GGUF tensor name ("blk.3.attn_q.weight" ->
 * "model.layers.3.self_attn.q_proj.weight"), for error messages; false if it has none. */
bool hf_weights_hf_name(const char *gguf_name, char *out, size_t cap);

/* Mixture of experts (qwen3_moe): HF stores each expert's projections as its own matrix, where
 * a GGUF stacks them in one 3-D ffn_<kind>_exps tensor. Expert e of layer il is the view
 * "blk.<il>.ffn_<kind>_exps.<e>.weight" (kind 0 gate, 1 up, 2 down), a 2-D matrix in the
 * mapping like any other (never copied: the loader takes per-expert pointers); hf_weights_open
 * has checked every one of them is present. hf: the HF name instead. */
void hf_weights_expert_name(int64_t il, int kind, int64_t e, bool hf, char *out, size_t cap);

#endif
