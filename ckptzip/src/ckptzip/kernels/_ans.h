/* The ANS model shared by _native.c (one stream per context) and _entropy.c (lanes).
 *
 * constriction's Categorical(counts, perfect=False) at 24-bit precision:
 * left[i] = trunc(cum_i * scale) + i with scale = (2^24 - alphabet) / sum(counts), in double,
 * in order; left[alphabet] = 2^24. One definition: the files each coder writes must decode
 * with the other's decoder, and both must match constriction's words.
 */
#ifndef CKZ_ANS_H
#define CKZ_ANS_H

#include <stdint.h>

#define ANS_PRECISION 24
#define ANS_TOTAL (1u << ANS_PRECISION)

static inline void ckz_ans_model(const uint32_t *counts, int32_t alphabet, uint32_t *left) {
    double norm = 0.0;
    for (int32_t s = 0; s < alphabet; s++) norm += (double)counts[s];
    double scale = (double)(ANS_TOTAL - (uint32_t)alphabet) / norm;
    double cum = 0.0;
    for (int32_t s = 0; s < alphabet; s++) {
        left[s] = (uint32_t)(cum * scale) + (uint32_t)s;
        cum += (double)counts[s];
    }
    left[alphabet] = ANS_TOTAL;
}

#endif
