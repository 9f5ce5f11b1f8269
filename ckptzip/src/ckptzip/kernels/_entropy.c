/* ckptzip's compiled entropy stage: the lane-split ANS layout ("ans-lanes") of
 * ckptzip/entropy.py, encoded and decoded block by block, and decoded straight into the
 * output tensor (each symbol's level written in the tensor's dtype, no index array between).
 *
 * The layout: a stream of n symbols is cut into blocks of `block` symbols; within a block,
 * symbol i belongs to lane (i - block_start) mod `lanes`. Every (block, lane) is its own
 * stream of constriction's AnsCoder (the coder of _native.c, word for word: 32-bit words,
 * 64-bit state, 24-bit precision, Categorical(counts, perfect=False)), holding its symbols in
 * position order, each under the model of its position's context. Independent streams are
 * what make this fast: the lanes of a block decode in one loop whose steps do not wait on
 * each other (the single stream's step is a chain of dependent loads and a multiply), and
 * blocks decode on as many threads as there are (the functions take a range of blocks and
 * hold no state: ctypes drops the GIL around each call).
 *
 * Plain C99 over caller-owned buffers, like _native.c; built into the same library.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(_WIN32)
#define CKZ_API __declspec(dllexport)
#else
#define CKZ_API __attribute__((visibility("default")))
#endif

#include "_ans.h" /* ckz_ans_model (the model _native.c codes with), ckz_only_symbol */

#define PRECISION ANS_PRECISION
#define TOTAL ANS_TOTAL
#define MAX_LANES 64
#define CHUNK 4096 /* symbols decoded into a cache-resident buffer, then gathered */

/* the context of position i: the last c with bounds[c] <= i (bounds ascending, c < contexts) */
static int32_t context_of(const int64_t *bounds, int32_t contexts, int64_t i) {
    int32_t lo = 0, hi = contexts; /* answer in [lo, hi) */
    while (hi - lo > 1) {
        int32_t mid = (lo + hi) >> 1;
        if (bounds[mid] <= i)
            lo = mid;
        else
            hi = mid;
    }
    /* empty contexts share their start with the next one: step over them */
    while (lo + 1 < contexts && bounds[lo + 1] <= i) lo++;
    return lo;
}

/* -- encoding -------------------------------------------------------------------------------
 *
 * Blocks [b_lo, b_hi): stream s = b * lanes + l writes its words (emission order: the bulk,
 * then the state's low word and, when non-zero, its high word) to scratch + s * cap and its
 * length to lengths[s]. Returns 0, or -1 when a stream would exceed cap words (cannot happen
 * with cap = 3 * ceil(block / lanes) / 4 + 4: a symbol costs at most 24 bits). */
CKZ_API int32_t ckz_ans_lanes_encode(const uint8_t *sym, int64_t n, const int64_t *bounds,
                                     int32_t contexts, int32_t alphabet,
                                     const uint32_t *counts, int64_t block, int32_t lanes,
                                     int64_t b_lo, int64_t b_hi, uint32_t *scratch,
                                     int64_t cap, int64_t *lengths) {
    uint32_t left[257];
    uint64_t st[MAX_LANES];
    int64_t len[MAX_LANES];
    if (lanes < 1 || lanes > MAX_LANES) return -1;
    for (int64_t b = b_lo; b < b_hi; b++) {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        uint32_t *base = scratch + (size_t)(b * lanes) * (size_t)cap;
        for (int32_t l = 0; l < lanes; l++) st[l] = 0, len[l] = 0;
        if (hi > lo) {
            /* contexts overlapping the block, back to front (a stack decodes LIFO) */
            int32_t c = context_of(bounds, contexts, hi - 1);
            int64_t i = hi - 1;
            for (; c >= 0 && i >= lo; c--) {
                int64_t run_lo = bounds[c] > lo ? bounds[c] : lo;
                if (run_lo > i) continue;
                const uint32_t *row = counts + (size_t)c * (size_t)alphabet;
                if (ckz_only_symbol(row, alphabet) >= 0) { /* codes nothing */
                    i = run_lo - 1;
                    continue;
                }
                ckz_ans_model(row, alphabet, left);
                int32_t l = (int32_t)((i - lo) % lanes);
                for (; i >= run_lo; i--) {
                    uint32_t s = sym[i];
                    uint64_t state = st[l];
                    uint64_t prob = (uint64_t)(left[s + 1] - left[s]);
                    if ((state >> (64 - PRECISION)) >= prob) {
                        if (len[l] >= cap) return -1;
                        base[(size_t)l * (size_t)cap + (size_t)len[l]++] = (uint32_t)state;
                        state >>= 32;
                    }
                    uint64_t prefix = state / prob;
                    uint64_t rem = state - prefix * prob;
                    st[l] = (prefix << PRECISION) | (uint64_t)(left[s] + rem);
                    l = l == 0 ? lanes - 1 : l - 1;
                }
            }
        }
        for (int32_t l = 0; l < lanes; l++) {
            uint32_t *w = base + (size_t)l * (size_t)cap;
            uint64_t state = st[l];
            if (state != 0) {
                if (len[l] + 2 > cap) return -1;
                w[len[l]++] = (uint32_t)state;
                if (state >> 32) w[len[l]++] = (uint32_t)(state >> 32);
            }
            lengths[b * lanes + l] = len[l];
        }
    }
    return 0;
}

/* -- decoding -------------------------------------------------------------------------------*/

/* out[at + j] = table[chunk[j]] (size 2, 4 or 8 bytes; the symbols themselves when table is
 * NULL); with base (size 4: float, 8: double), out[at + j] = base[at + j] + table[chunk[j]],
 * one IEEE addition in the tensor's dtype, which is what torch's `base + change` computes
 * (a residual's reconstruction; base may be out itself). */
int32_t ckz_avx512_ok(void); /* _native.c */
int64_t ckz_gather_fast(const uint8_t *idx, int64_t k, const void *table, int32_t size,
                        const void *base, void *out); /* _native.c */
void ckz_unpack(const uint8_t *data, int64_t n, int32_t bits, uint8_t *out); /* _native.c */

static void put_any(const uint8_t *chunk, int64_t k, const void *table, int32_t size,
                    const void *base, void *out, int64_t at);

/* put: the vector pass of _native.c where it applies (a 64-symbol block whose symbols address
 * the table's first 16 or 32 entries: see gather_avx512), the loops below over what it
 * leaves */
static void put(const uint8_t *chunk, int64_t k, const void *table, int32_t size,
                const void *base, void *out, int64_t at) {
    int64_t j = 0;
    if (table != NULL)
        while (j < k) {
            j += ckz_gather_fast(chunk + j, k - j, table, size,
                                 base == NULL ? NULL : (const uint8_t *)base + (at + j) * size,
                                 (uint8_t *)out + (at + j) * size);
            int64_t stop = j + 64 < k ? j + 64 : k;
            if (stop > j) put_any(chunk + j, stop - j, table, size, base, out, at + j);
            j = stop;
            if (!ckz_avx512_ok()) break;
        }
    if (j < k) put_any(chunk + j, k - j, table, size, base, out, at + j);
}

static void put_any(const uint8_t *chunk, int64_t k, const void *table, int32_t size,
                    const void *base, void *out, int64_t at) {
    if (table == NULL) {
        memcpy((uint8_t *)out + at, chunk, (size_t)k);
    } else if (base != NULL && size == 4) {
        const float *t = (const float *)table;
        const float *b = (const float *)base + at;
        float *o = (float *)out + at;
        for (int64_t j = 0; j < k; j++) o[j] = b[j] + t[chunk[j]];
    } else if (base != NULL) {
        const double *t = (const double *)table;
        const double *b = (const double *)base + at;
        double *o = (double *)out + at;
        for (int64_t j = 0; j < k; j++) o[j] = b[j] + t[chunk[j]];
    } else if (size == 2) {
        const uint16_t *t = (const uint16_t *)table;
        uint16_t *o = (uint16_t *)out + at;
        for (int64_t j = 0; j < k; j++) o[j] = t[chunk[j]];
    } else if (size == 4) {
        const uint32_t *t = (const uint32_t *)table;
        uint32_t *o = (uint32_t *)out + at;
        for (int64_t j = 0; j < k; j++) o[j] = t[chunk[j]];
    } else {
        const uint64_t *t = (const uint64_t *)table;
        uint64_t *o = (uint64_t *)out + at;
        for (int64_t j = 0; j < k; j++) o[j] = t[chunk[j]];
    }
}

static void fill(int32_t s, int64_t k, const void *table, int32_t size, const void *base,
                 void *out, int64_t at) {
    uint8_t chunk[CHUNK];
    memset(chunk, s, sizeof chunk);
    for (int64_t j = 0; j < k; j += CHUNK)
        put(chunk, k - j < CHUNK ? k - j : CHUNK, table, size, base, out, at + j);
}

/* put and fill for _wide.c, which decodes into the tensor the same way */
void ckz_put_levels(const uint8_t *chunk, int64_t k, const void *table, int32_t size,
                    const void *base, void *out, int64_t at) {
    put(chunk, k, table, size, base, out, at);
}

void ckz_fill_levels(int32_t s, int64_t k, const void *table, int32_t size, const void *base,
                     void *out, int64_t at) {
    fill(s, k, table, size, base, out, at);
}

/* One decoding step of lane state `s` (its words below `t`, down to `floor`). */
#define STEP(s, t, floor, dst)                                                              \
    do {                                                                                    \
        uint32_t y_;                                                                        \
        ANS_ADVANCE(dtab, left, s, y_);                                                     \
        if ((s) < ((uint64_t)1 << 32) && (t) > (floor)) (s) = ((s) << 32) | words[--(t)]; \
        (dst) = (uint8_t)y_;                                                                \
    } while (0)

/* Blocks [b_lo, b_hi) of the layout, into out: the symbols (table NULL, out uint8) or
 * table[symbol] (size 2, 4 or 8 bytes), added to base when it is not NULL (see put).
 * starts[s] .. starts[s + 1] are stream s's words.
 * Returns 0 when every stream ends empty, 1 when coded data is left, 2 when a stream ends in
 * a zero word (no coder writes one). */
CKZ_API int32_t ckz_ans_lanes_decode(const uint32_t *words, const int64_t *starts, int64_t n,
                                     const int64_t *bounds, int32_t contexts,
                                     int32_t alphabet, const uint32_t *counts, int64_t block,
                                     int32_t lanes, int64_t b_lo, int64_t b_hi,
                                     const void *table, int32_t size, const void *base,
                                     void *out) {
    uint32_t left[257];
    uint64_t dtab[1 << ANS_DSLOT_BITS];
    uint8_t chunk[CHUNK];
    uint64_t st[MAX_LANES];
    int64_t top[MAX_LANES], floor[MAX_LANES];
    if (lanes < 1 || lanes > MAX_LANES) return 1;
    int32_t status = 0;
    for (int64_t b = b_lo; b < b_hi; b++) {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        for (int32_t l = 0; l < lanes; l++) {
            int64_t s0 = starts[b * lanes + l], s1 = starts[b * lanes + l + 1];
            floor[l] = s0;
            top[l] = s1;
            st[l] = 0;
            if (s1 > s0 && words[s1 - 1] == 0) return 2;
            if (top[l] > s0) st[l] = words[--top[l]];
            if (top[l] > s0) st[l] = (st[l] << 32) | words[--top[l]];
        }
        int64_t i = lo;
        int32_t c = hi > lo ? context_of(bounds, contexts, lo) : contexts;
        for (; c < contexts && i < hi; c++) {
            int64_t run_hi = bounds[c + 1] < hi ? bounds[c + 1] : hi;
            if (run_hi <= i) continue;
            const uint32_t *row = counts + (size_t)c * (size_t)alphabet;
            int32_t only = ckz_only_symbol(row, alphabet);
            if (only >= 0) {
                fill(only, run_hi - i, table, size, base, out, i);
                i = run_hi;
                continue;
            }
            ckz_ans_model(row, alphabet, left);
            ckz_ans_dtable(left, dtab);
            while (i < run_hi) {
                int64_t stop = run_hi - i < CHUNK ? run_hi : i + CHUNK;
                int64_t at = i;
                int32_t l = (int32_t)((i - lo) % lanes);
                if (lanes == 4) { /* the writer's choice: four states in registers */
                    for (; l != 0 && i < stop; i++, l = (l + 1) & 3)
                        STEP(st[l], top[l], floor[l], chunk[i - at]);
                    uint64_t a = st[0], bb = st[1], cc = st[2], d = st[3];
                    int64_t ta = top[0], tb = top[1], tc = top[2], td = top[3];
                    for (; i + 4 <= stop; i += 4) {
                        uint8_t *dst = chunk + (i - at);
                        STEP(a, ta, floor[0], dst[0]);
                        STEP(bb, tb, floor[1], dst[1]);
                        STEP(cc, tc, floor[2], dst[2]);
                        STEP(d, td, floor[3], dst[3]);
                    }
                    st[0] = a, st[1] = bb, st[2] = cc, st[3] = d;
                    top[0] = ta, top[1] = tb, top[2] = tc, top[3] = td;
                    for (l = 0; i < stop; i++, l++) STEP(st[l], top[l], floor[l], chunk[i - at]);
                } else {
                    for (; i < stop; i++) {
                        STEP(st[l], top[l], floor[l], chunk[i - at]);
                        if (++l == lanes) l = 0;
                    }
                }
                put(chunk, stop - at, table, size, base, out, at);
            }
        }
        for (int32_t l = 0; l < lanes; l++)
            if (st[l] != 0 || top[l] != floor[l]) status = 1;
    }
    return status;
}

/* -- packed indices straight into the output tensor --------------------------------------
 *
 * The LSB-first `bits`-bit stream of ckptzip/packing.py (the inverse of ckz_pack), each
 * index written as table[index] (size 2, 4 or 8 bytes) into out, or added to base (see put),
 * CHUNK at a time through a cache-resident buffer. Returns the largest index seen, which the
 * caller checks against its level count. */
CKZ_API int32_t ckz_unpack_gather(const uint8_t *data, int64_t n, int32_t bits,
                                  const void *table, int32_t size, const void *base,
                                  void *out) {
    uint8_t chunk[CHUNK];
    uint8_t top = 0;
    /* CHUNK indices are CHUNK * bits / 8 whole bytes: each chunk starts on a byte */
    for (int64_t at = 0; at < n; at += CHUNK) {
        int64_t k = n - at < CHUNK ? n - at : CHUNK;
        ckz_unpack(data + at / 8 * bits, k, bits, chunk);
        for (int64_t j = 0; j < k; j++) top = chunk[j] > top ? chunk[j] : top;
        put(chunk, k, table, size, base, out, at);
    }
    return top;
}
