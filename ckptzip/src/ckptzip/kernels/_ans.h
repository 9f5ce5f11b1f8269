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

/* The rule at any precision (total = 2^precision): _wide.c's coder takes it at 12 bits. */
static inline void ckz_ans_left(const uint32_t *counts, int32_t alphabet, uint32_t total,
                                uint32_t *left) {
    double norm = 0.0;
    for (int32_t s = 0; s < alphabet; s++) norm += (double)counts[s];
    double scale = (double)(total - (uint32_t)alphabet) / norm;
    double cum = 0.0;
    for (int32_t s = 0; s < alphabet; s++) {
        left[s] = (uint32_t)(cum * scale) + (uint32_t)s;
        cum += (double)counts[s];
    }
    left[alphabet] = total;
}

static inline void ckz_ans_model(const uint32_t *counts, int32_t alphabet, uint32_t *left) {
    ckz_ans_left(counts, alphabet, ANS_TOTAL, left);
}

/* floor(x / d) for every 64-bit x by a multiply-high, a subtraction and two shifts, for a
 * divisor 2 <= d < 2^32 fixed per symbol (Granlund and Montgomery's method in libdivide's
 * branch-free form: magic = floor(2^(64 + k) / d) * 2 + a rounding bit + 1 - 2^64 with
 * k = floor(log2 d), 0 for a power of two; shift k, k - 1 for a power of two). The encoders'
 * 64-bit division of the state by a symbol's width was a latency of its own per symbol;
 * this is a multiplication's. d = 1 is the caller's (the quotient is x). */
typedef struct {
    uint64_t magic;
    uint32_t shift;
} ckz_div;

static inline ckz_div ckz_div_prepare(uint64_t d) {
    ckz_div v;
    uint32_t k = 63u - (uint32_t)__builtin_clzll(d);
    if ((d & (d - 1)) == 0) {
        v.magic = 0;
        v.shift = k - 1;
        return v;
    }
    unsigned __int128 num = (unsigned __int128)1 << (64 + k);
    uint64_t m = (uint64_t)(num / d), rem = (uint64_t)(num % d);
    m += m; /* the 65-bit magic's low 64 bits: 2^(65 + k) / d */
    uint64_t twice = rem + rem;
    if (twice >= d || twice < rem) m += 1;
    v.magic = m + 1;
    v.shift = k;
    return v;
}

static inline uint64_t ckz_div_apply(uint64_t x, ckz_div v) {
    uint64_t q = (uint64_t)(((unsigned __int128)x * v.magic) >> 64);
    return (((x - q) >> 1) + q) >> v.shift;
}

/* The divisors of a model's symbols (their widths left[s + 1] - left[s]) where counts[s] is
 * not zero: the symbols a context codes. */
static inline void ckz_ans_divisors(const uint32_t *counts, int32_t alphabet,
                                    const uint32_t *left, ckz_div *div) {
    for (int32_t s = 0; s < alphabet; s++)
        if (counts[s]) {
            uint64_t w = (uint64_t)(left[s + 1] - left[s]);
            div[s] = w > 1 ? ckz_div_prepare(w) : (ckz_div){0, 0};
        }
}

/* floor(x / w) for a symbol of width w with divisor v (ckz_ans_divisors). */
static inline uint64_t ckz_ans_quotient(uint64_t x, uint64_t w, ckz_div v) {
    return w == 1 ? x : ckz_div_apply(x, v);
}

/* -1 when a context's counts hold two or more distinct symbols, else its one symbol (0 if
 * none): such a context codes nothing, in every layout */
static inline int32_t ckz_only_symbol(const uint32_t *counts, int32_t alphabet) {
    int32_t seen = 0, only = 0;
    for (int32_t s = 0; s < alphabet; s++)
        if (counts[s]) {
            seen++;
            only = s;
        }
    return seen > 1 ? -1 : only;
}

/* The decoder's table: the 24-bit quantile q = state mod 2^24 of a step falls in slot
 * q >> ANS_DSLOT_SHIFT, whose entry holds, where the whole slot is one symbol's y, that
 * symbol's width left[y + 1] - left[y] in its high half and left[y] | y << 24 in its low
 * half: one load gives the step all it needs, with few instructions to take it apart (a
 * step is throughput-bound with four lanes in flight, so each instruction counts). A slot a
 * boundary between two symbols crosses holds width 0 (no symbol has it) and its first
 * symbol, from which the step searches `left`. 1024 slots: 8 KiB a context (cheap to build
 * for a short context, and L1-resident beside the other lanes' data); a quantile lands in a
 * split slot with probability at most (alphabet - 1) / 1024. */
#define ANS_DSLOT_BITS 10
#define ANS_DSLOT_SHIFT (ANS_PRECISION - ANS_DSLOT_BITS)

static inline void ckz_ans_dtable(const uint32_t *left, uint64_t *tab) {
    /* symbol by symbol, the slots that start inside its range: all but the last are its
     * alone, the last too when the range ends at the slot's end (left[alphabet] = 2^24 ends
     * the last slot) */
    uint32_t k = 0;
    for (uint32_t y = 0; k < (1u << ANS_DSLOT_BITS); y++) {
        uint32_t lo = left[y], hi = left[y + 1];
        uint32_t end = (hi + (1u << ANS_DSLOT_SHIFT) - 1) >> ANS_DSLOT_SHIFT;
        uint64_t part = lo | y << 24, whole = (uint64_t)(hi - lo) << 32 | part;
        for (; k < end; k++) tab[k] = (k + 1) << ANS_DSLOT_SHIFT <= hi ? whole : part;
    }
}

/* One decoding step on `state` (a uint64_t lvalue) before its refill: the symbol to `y`,
 * and state = (state >> 24) * width + (q - start). q - start is (state - left[y]) mod 2^24:
 * the subtraction's low 24 bits do not depend on the bits above them. */
#define ANS_ADVANCE(tab, left, state, y)                                                   \
    do {                                                                                   \
        uint64_t e_ = (tab)[((uint32_t)(state) >> ANS_DSLOT_SHIFT) &                       \
                            ((1u << ANS_DSLOT_BITS) - 1)];                                 \
        uint64_t w_ = e_ >> 32;                                                            \
        uint32_t lo_ = (uint32_t)e_;                                                       \
        if (__builtin_expect(w_ == 0, 0)) {                                                \
            uint32_t q_ = (uint32_t)(state) & (ANS_TOTAL - 1), y_ = lo_ >> 24;             \
            while ((left)[y_ + 1] <= q_) y_++;                                             \
            lo_ = (left)[y_] | y_ << 24;                                                   \
            w_ = (left)[y_ + 1] - (left)[y_];                                              \
        }                                                                                  \
        (y) = lo_ >> 24;                                                                   \
        (state) = ((state) >> ANS_PRECISION) * w_ +                                        \
                  (((uint32_t)(state) - lo_) & (ANS_TOTAL - 1));                           \
    } while (0)

#endif
