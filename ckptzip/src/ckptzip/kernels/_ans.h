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

/* The decoder's lookup of a state's symbol: the 24-bit quantile q of a step falls in slot
 * q >> ANS_DSLOT_SHIFT, whose entry holds, where the whole slot is one symbol's, that symbol
 * y, its start left[y] and its width left[y + 1] - left[y]: one load where the search through
 * `left` took two dependent ones after the slot's. A slot a boundary between two symbols
 * crosses is marked (bit 63) and holds its first symbol, from which the step searches. 1024
 * slots: 8 KiB a context (cheap to build for a short context, and L1-resident beside the
 * other lanes' data); a quantile lands in a marked one with probability at most
 * (alphabet - 1) / 1024. */
#define ANS_DSLOT_BITS 10
#define ANS_DSLOT_SHIFT (ANS_PRECISION - ANS_DSLOT_BITS)
#define ANS_DSPLIT ((uint64_t)1 << 63)

static inline void ckz_ans_dtable(const uint32_t *left, uint64_t *tab) {
    uint32_t y = 0;
    for (uint32_t k = 0; k < (1u << ANS_DSLOT_BITS); k++) {
        uint32_t lo = k << ANS_DSLOT_SHIFT, hi = lo + (1u << ANS_DSLOT_SHIFT) - 1;
        while (left[y + 1] <= lo) y++;
        tab[k] = (uint64_t)left[y] | (uint64_t)(left[y + 1] - left[y]) << 24 |
                 (uint64_t)y << 49 | (left[y + 1] <= hi ? ANS_DSPLIT : 0);
    }
}

/* One decoding step's symbol, start and width for quantile q (see ckz_ans_dtable). */
#define ANS_LOOKUP(tab, left, q, y, start, width)                                          \
    do {                                                                                   \
        uint64_t e_ = (tab)[(q) >> ANS_DSLOT_SHIFT];                                       \
        (y) = (uint32_t)(e_ >> 49) & 0xff;                                                 \
        if (__builtin_expect((e_ & ANS_DSPLIT) != 0, 0)) {                                 \
            while ((left)[(y) + 1] <= (q)) (y)++;                                          \
            (start) = (left)[(y)];                                                         \
            (width) = (left)[(y) + 1] - (start);                                           \
        } else {                                                                           \
            (start) = (uint32_t)e_ & 0xffffff;                                             \
            (width) = (uint32_t)(e_ >> 24) & 0x1ffffff;                                    \
        }                                                                                  \
    } while (0)

#endif
