/* Prompt-lookup drafts for speculative decoding: text that is being edited, summarised or
 * written as code repeats spans of what came before, so the continuation of the latest
 * earlier occurrence of the sequence's last few tokens is a good guess of what follows. */
#ifndef INVAR_SPEC_NGRAM_H
#define INVAR_SPEC_NGRAM_H
#include <stdint.h>

/* Longest and shortest suffix looked up. Shorter suffixes match more often and are right
 * less often; a wrong draft costs only its rows in the verification forward. */
#define NGRAM_MAX 4
#define NGRAM_MIN 2

/* Up to k tokens that followed the latest earlier occurrence of seq's last g tokens, for the
 * longest g in [NGRAM_MIN, NGRAM_MAX] that occurs; written to out, count returned (0: no
 * match). A pure function of seq. */
int32_t ngram_propose(const int32_t *seq, int64_t n, int32_t k, int32_t *out);

#endif
