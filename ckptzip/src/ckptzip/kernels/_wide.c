/* ckptzip's "ans-wide" coder (ckptzip/entropy.py): a stream of n symbols under one static
 * model, cut into blocks of `block` symbols (a multiple of 32); within a block, symbol i
 * belongs to lane i mod 32. Each lane is a rANS coder with a 32-bit state in [2^16, 2^32),
 * 16-bit words and 12-bit frequencies. A block's words are one stream: the 32 final states of
 * its encoder (lane order, each as its low then its high word), then every word the encoder
 * pushed out, in the order a decoder takes them back (step by step, lane by lane within a
 * step), so a vector of lanes refills from one contiguous run of words.
 *
 * Why this layout (against "ans-lanes": four 64-bit constriction coders at 24-bit precision):
 * a step is a 12-bit slot, a multiply and an add on 32-bit lanes, eight lanes a vector, and
 * with at most 16 symbols (the quantizer's usual level count) the symbol, its frequency, start
 * and level come from compares and register permutes instead of loads; the refills of a
 * vector are one 16-byte load and a byte shuffle. Measured on the library's own index streams
 * (benchmarks/ans_wide.py, one core, AVX2): 2.2x the ans-lanes decoder through the library's
 * calls, 3.1x for the bare loop, for 0.02 % more bits (the 12-bit precision) and 132 bytes a
 * block (the final states, the word count); without AVX2 the scalar loop runs at 0.75x.
 *
 * The model: left[s] = trunc(cum_s * scale) + s with scale = (2^12 - alphabet) / n and cum_s
 * the count of symbols below s (in double, in order), left[alphabet] = 2^12; symbol s has
 * frequency left[s + 1] - left[s] >= 1. A stream whose counts hold one distinct symbol codes
 * nothing: every block has zero words.
 *
 * Encoding, per block, from its last step to its first and from lane 31 down to 0: a state x
 * taking symbol s first pushes its low 16 bits and shifts them out when x >= freq[s] * 2^20,
 * then becomes (x / freq[s]) * 2^12 + x mod freq[s] + left[s]. Every state starts at 2^16, so
 * the decoder checks that each ends there and that it read every word.
 *
 * Plain C99 over caller-owned buffers, the vector decoders behind __builtin_cpu_supports
 * (CKPTZIP_NO_AVX2=1 makes a process take the scalar loop; both write the same values). The
 * functions take a range of blocks and hold no state: ctypes drops the GIL around each call,
 * so blocks code and decode on as many threads as there are.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_ans.h" /* ckz_ans_left: the model's rule; ckz_only_symbol */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CKZ_WIDE_X86 1
#endif

#if defined(_WIN32)
#define CKZ_API __declspec(dllexport)
#else
#define CKZ_API __attribute__((visibility("default")))
#endif

#define WIDE_PRECISION 12
#define WIDE_TOTAL (1u << WIDE_PRECISION)
#define WIDE_LOW (1u << 16) /* a state's floor: below it, the decoder refills */
#define WIDE_LANES 32
#define WIDE_CHUNK 4096 /* symbols decoded at a time into a cache-resident buffer */

/* _entropy.c: table[symbol] into the tensor (size 2, 4 or 8 bytes), added to base when it is
 * not NULL; the symbols themselves when table is NULL */
void ckz_put_levels(const uint8_t *chunk, int64_t k, const void *table, int32_t size,
                    const void *base, void *out, int64_t at);
void ckz_fill_levels(int32_t s, int64_t k, const void *table, int32_t size, const void *base,
                     void *out, int64_t at);

/* the model: frequencies and starts (cum[alphabet] = 2^12), by the rule "ans" codes with at
 * 24 bits (_ans.h); -1 when the stream holds two or more distinct symbols, else its one
 * symbol (0 when it holds none) */
static int32_t wide_model(const uint32_t *counts, int32_t alphabet, uint32_t *freq,
                          uint32_t *cum) {
    int32_t only = ckz_only_symbol(counts, alphabet);
    if (only >= 0) return only;
    ckz_ans_left(counts, alphabet, WIDE_TOTAL, cum);
    for (int32_t s = 0; s < alphabet; s++) freq[s] = cum[s + 1] - cum[s];
    return -1;
}

/* -- encoding ---------------------------------------------------------------------------- */

int32_t ckz_avx2_ok(void);   /* _native.c: the AVX2 switch of every pass */
int32_t ckz_avx512_ok(void); /* _native.c: the AVX-512 switch (BW, DQ, VBMI2) */

/* One encoder step of lanes [0, top) at sym[0..top), from the last lane down (the scalar
 * rule the vector step below follows): returns the new word pointer. */
static inline uint16_t *wide_encode_step(const uint8_t *sym, int top, uint32_t *x,
                                         const uint32_t *freq, const uint32_t *cum,
                                         uint16_t *ptr) {
    for (int l = top - 1; l >= 0; l--) {
        uint32_t s = sym[l], f = freq[s], v = x[l];
        /* without a branch (whether a symbol pushes a word is a coin toss the predictor
         * loses): the word is always written below ptr, which moves over it only when it is
         * pushed (the cap leaves room below) */
        uint32_t push = (uint64_t)v >= (uint64_t)f << (32 - WIDE_PRECISION);
        ptr[-1] = (uint16_t)v;
        ptr -= push;
        v >>= 16 * push;
        /* a plain division: measured faster than a multiply by f's reciprocal here */
        x[l] = ((v / f) << WIDE_PRECISION) + v % f + cum[s];
    }
    return ptr;
}

#ifdef CKZ_WIDE_X86
/* Full steps of 32 lanes, from the step at `at` down to the one at `lo`, with AVX-512, for
 * alphabets of up to 32: lanes 31-16 then 15-0 as two vectors; frequency and start by
 * register permutes, the pushed words by one compressing store (vpcompressw: in lane order,
 * just below the pointer, as the scalar loop leaves them), the quotient by a division in
 * double (exact: v < 2^32 and f < 2^13, so v / f lies at least 2^-12 from the next integer
 * and the correctly rounded quotient truncates to the integer one). The same words as
 * wide_encode_step. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi2,popcnt"))) static uint16_t *
wide_encode_avx512(const uint8_t *sym, int64_t lo, int64_t at, uint32_t *x, const uint32_t *freq,
                   const uint32_t *cum, uint16_t *ptr) {
    uint32_t f32[32] = {0}, c32[32] = {0};
    memcpy(f32, freq, sizeof f32); /* freq, cum: 256 entries */
    memcpy(c32, cum, sizeof c32);
    const __m512i f0 = _mm512_loadu_si512((const void *)f32);
    const __m512i f1 = _mm512_loadu_si512((const void *)(f32 + 16));
    const __m512i c0 = _mm512_loadu_si512((const void *)c32);
    const __m512i c1 = _mm512_loadu_si512((const void *)(c32 + 16));
    __m512i xv[2] = {_mm512_loadu_si512((const void *)x),
                     _mm512_loadu_si512((const void *)(x + 16))};
    for (; at >= lo; at -= WIDE_LANES) {
        for (int v = 1; v >= 0; v--) {
            __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sym + at + 16 * v)));
            __m512i f = _mm512_permutex2var_epi32(f0, s, f1);
            __m512i y = xv[v];
            __mmask16 push = _mm512_cmpge_epu32_mask(y, _mm512_slli_epi32(f, 32 - WIDE_PRECISION));
            int k = __builtin_popcount((unsigned)push);
            _mm256_mask_compressstoreu_epi16(ptr - k, push, _mm512_cvtepi32_epi16(y));
            ptr -= k;
            y = _mm512_mask_srli_epi32(y, push, y, 16);
            __m512d lo_q = _mm512_div_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(y)),
                                         _mm512_cvtepu32_pd(_mm512_castsi512_si256(f)));
            __m512d hi_q = _mm512_div_pd(_mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(y, 1)),
                                         _mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(f, 1)));
            __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvttpd_epu32(lo_q)),
                                           _mm512_cvttpd_epu32(hi_q), 1);
            __m512i r = _mm512_sub_epi32(y, _mm512_mullo_epi32(q, f));
            xv[v] = _mm512_add_epi32(
                _mm512_add_epi32(_mm512_slli_epi32(q, WIDE_PRECISION), r),
                _mm512_permutex2var_epi32(c0, s, c1));
        }
    }
    _mm512_storeu_si512((void *)x, xv[0]);
    _mm512_storeu_si512((void *)(x + 16), xv[1]);
    return ptr;
}
#endif

/* Blocks [b_lo, b_hi): block b's words to scratch + b * cap (a prefix of its row), their
 * count to lengths[b]. cap >= block + 64 always suffices (a symbol pushes at most one word).
 * Returns 0, or -1 on arguments out of range. */
CKZ_API int32_t ckz_wide_encode(const uint8_t *sym, int64_t n, const uint32_t *counts,
                                int32_t alphabet, int64_t block, int64_t b_lo, int64_t b_hi,
                                uint16_t *scratch, int64_t cap, int64_t *lengths) {
    uint32_t freq[256] = {0}, cum[257] = {0}; /* zeros past the alphabet: the vector step */
    if (alphabet < 1 || alphabet > 256 || block < WIDE_LANES || block % WIDE_LANES) return -1;
    int32_t only = wide_model(counts, alphabet, freq, cum);
#ifdef CKZ_WIDE_X86
    int vector = alphabet <= 32 && ckz_avx2_ok() && ckz_avx512_ok();
#endif
    for (int64_t b = b_lo; b < b_hi; b++) {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        lengths[b] = 0;
        if (only >= 0 || hi <= lo) continue;
        if (hi - lo + 2 * WIDE_LANES > cap) return -1;
        uint16_t *row = scratch + (size_t)b * (size_t)cap, *end = row + cap, *ptr = end;
        uint32_t x[WIDE_LANES];
        for (int l = 0; l < WIDE_LANES; l++) x[l] = WIDE_LOW;
        int64_t at = lo + (hi - lo - 1) / WIDE_LANES * WIDE_LANES; /* the last step */
        if (hi - at < WIDE_LANES) { /* a partial last step */
            ptr = wide_encode_step(sym + at, (int)(hi - at), x, freq, cum, ptr);
            at -= WIDE_LANES;
        }
#ifdef CKZ_WIDE_X86
        if (vector && at >= lo) { /* CKPTZIP_NO_AVX512: the scalar steps */
            ptr = wide_encode_avx512(sym, lo, at, x, freq, cum, ptr);
            at = lo - WIDE_LANES;
        }
#endif
        for (; at >= lo; at -= WIDE_LANES)
            ptr = wide_encode_step(sym + at, WIDE_LANES, x, freq, cum, ptr);
        for (int l = WIDE_LANES - 1; l >= 0; l--) {
            *--ptr = (uint16_t)(x[l] >> 16);
            *--ptr = (uint16_t)x[l];
        }
        int64_t used = end - ptr;
        memmove(row, ptr, (size_t)used * sizeof *row);
        lengths[b] = used;
    }
    return 0;
}

/* -- decoding ---------------------------------------------------------------------------- */

/* One block's decoder: the lanes' states and the words not yet read. */
typedef struct {
    uint32_t x[WIDE_LANES];
    const uint16_t *p, *end;
} wide_lanes;

/* The decoder's model: the slot table (entry: symbol << 24 | (freq - 1) << 12 |
 * slot - start, so a step needs one load) and, for the vector decoders of small alphabets,
 * the frequencies and starts padded to 32 entries. */
typedef struct {
    uint32_t slots[WIDE_TOTAL];
    uint32_t freq32[32], cum32[32];
    int32_t alphabet;
} wide_model_t;

/* the registers' part of the model (freq32, cum32, alphabet): all the AVX-512 decoder (at
 * most 32 symbols) and the AVX2 compare decoder (at most 16) read */
static void wide_register_model(const uint32_t *freq, const uint32_t *cum, int32_t alphabet,
                                wide_model_t *m) {
    memset(m->freq32, 0, sizeof m->freq32);
    memset(m->cum32, 0, sizeof m->cum32);
    for (int32_t s = 0; s < alphabet && s < 32; s++) m->freq32[s] = freq[s], m->cum32[s] = cum[s];
    m->alphabet = alphabet;
}

static void wide_decoder_model(const uint32_t *freq, const uint32_t *cum, int32_t alphabet,
                               wide_model_t *m) {
    for (int32_t s = 0; s < alphabet; s++)
        for (uint32_t k = 0; k < freq[s]; k++)
            m->slots[cum[s] + k] = (uint32_t)s << 24 | (freq[s] - 1) << 12 | k;
    wide_register_model(freq, cum, alphabet, m);
}
/* k symbols, the first in lane 0, by the scalar step: dst[i] = levels[symbol]. Returns 0, or
 * 1 where the words run out. The states live in a local array (through w, every store to
 * dst could overwrite them as far as the compiler knows). Branch-free refills measured
 * slower here (each lane's word position then waits on the lane before), and so did the 32
 * steps before their refills: this loop runs 1.2-1.4x the ans-lanes decoder's time, on
 * machines without AVX2 only. */
static int32_t wide_scalar(wide_lanes *w, int64_t k, const wide_model_t *m,
                           const uint32_t *restrict levels, uint32_t *restrict dst) {
    const uint16_t *p = w->p, *end = w->end;
    const uint32_t *restrict slots = m->slots;
    uint32_t x[WIDE_LANES];
    memcpy(x, w->x, sizeof x);
    for (int64_t i = 0; i < k; i++) {
        int l = (int)(i & (WIDE_LANES - 1));
        uint32_t e = slots[x[l] & (WIDE_TOTAL - 1)];
        uint32_t y = ((e >> 12 & 0xFFF) + 1) * (x[l] >> WIDE_PRECISION) + (e & 0xFFF);
        if (y < WIDE_LOW) {
            if (p == end) return 1;
            y = y << 16 | *p++;
        }
        x[l] = y;
        dst[i] = levels[e >> 24];
    }
    memcpy(w->x, x, sizeof x);
    w->p = p;
    return 0;
}

#ifdef CKZ_WIDE_X86
/* expand[m]: the byte shuffle that spreads the next popcount(m) 16-bit words of a load over
 * the 16-bit slots i of an 8-slot vector whose bit i of m is set (zero elsewhere) */
static uint8_t wide_expand[256][16];

__attribute__((constructor)) static void wide_expand_init(void) {
    for (int m = 0; m < 256; m++)
        for (int i = 0, k = 0; i < 8; i++) {
            int set = m >> i & 1;
            wide_expand[m][2 * i] = set ? (uint8_t)(2 * k) : 0x80;
            wide_expand[m][2 * i + 1] = set ? (uint8_t)(2 * k + 1) : 0x80;
            k += set;
        }
}

/* The refill of eight lanes: each lane of `need` takes the next word, in lane order. Returns
 * the updated states, or sets *short_ when fewer words are left than lanes need. */
__attribute__((target("avx2,popcnt"))) static inline __m256i
wide_refill(__m256i y, __m256i need, const uint16_t **p, const uint16_t *end, int *short_) {
    int m = _mm256_movemask_ps(_mm256_castsi256_ps(need));
    int take = __builtin_popcount((unsigned)m);
    __m128i raw;
    if (end - *p >= 8) {
        raw = _mm_loadu_si128((const __m128i *)*p);
    } else { /* the stream's last words: no load past its end */
        uint16_t tail[8] = {0};
        int64_t left = end - *p;
        if (left < take) {
            *short_ = 1;
            return y;
        }
        memcpy(tail, *p, (size_t)left * sizeof *tail);
        raw = _mm_loadu_si128((const __m128i *)tail);
    }
    __m128i words = _mm_shuffle_epi8(raw, _mm_loadu_si128((const __m128i *)wide_expand[m]));
    *p += take;
    __m256i refilled = _mm256_or_si256(_mm256_slli_epi32(y, 16), _mm256_cvtepu16_epi32(words));
    return _mm256_blendv_epi8(y, refilled, need);
}

/* lo[sym] or hi[sym - 8] for sym < 16: two 8-entry permutes and a blend */
__attribute__((target("avx2"))) static inline __m256i wide_lookup16(__m256i lo, __m256i hi,
                                                                     __m256i sym) {
    return _mm256_blendv_epi8(_mm256_permutevar8x32_epi32(lo, sym),
                              _mm256_permutevar8x32_epi32(hi, sym),
                              _mm256_cmpgt_epi32(sym, _mm256_set1_epi32(7)));
}

/* `steps` steps of 32 symbols, alphabets of at most 16: the symbol by compares against the
 * starts, its frequency, start and level by register lookups. */
__attribute__((target("avx2,popcnt"))) static int32_t
wide_avx2_compare(wide_lanes *w, int64_t steps, const wide_model_t *m, const uint32_t *levels,
                  uint32_t *dst) {
    const uint16_t *p = w->p, *end = w->end;
    int short_ = 0;
    __m256i x[4];
    for (int v = 0; v < 4; v++) x[v] = _mm256_loadu_si256((const __m256i *)(w->x + 8 * v));
    const __m256i low12 = _mm256_set1_epi32(WIDE_TOTAL - 1), zero = _mm256_setzero_si256();
    const __m256i f0 = _mm256_loadu_si256((const __m256i *)m->freq32);
    const __m256i f1 = _mm256_loadu_si256((const __m256i *)(m->freq32 + 8));
    const __m256i c0 = _mm256_loadu_si256((const __m256i *)m->cum32);
    const __m256i c1 = _mm256_loadu_si256((const __m256i *)(m->cum32 + 8));
    const __m256i v0 = _mm256_loadu_si256((const __m256i *)levels);
    const __m256i v1 = _mm256_loadu_si256((const __m256i *)(levels + 8));
    __m256i bound[16];
    for (int k = 1; k < m->alphabet; k++) bound[k] = _mm256_set1_epi32((int)m->cum32[k] - 1);
    for (int64_t t = 0; t < steps; t++) {
        for (int v = 0; v < 4; v++) {
            __m256i slot = _mm256_and_si256(x[v], low12), sym = zero;
            for (int k = 1; k < m->alphabet; k++)
                sym = _mm256_sub_epi32(sym, _mm256_cmpgt_epi32(slot, bound[k]));
            __m256i f = wide_lookup16(f0, f1, sym), c = wide_lookup16(c0, c1, sym);
            __m256i y = _mm256_add_epi32(
                _mm256_mullo_epi32(f, _mm256_srli_epi32(x[v], WIDE_PRECISION)),
                _mm256_sub_epi32(slot, c));
            _mm256_storeu_si256((__m256i *)(dst + 32 * t + 8 * v), wide_lookup16(v0, v1, sym));
            __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(y, 16), zero);
            x[v] = wide_refill(y, need, &p, end, &short_);
            if (short_) return 1;
        }
    }
    for (int v = 0; v < 4; v++) _mm256_storeu_si256((__m256i *)(w->x + 8 * v), x[v]);
    w->p = p;
    return 0;
}

/* `steps` steps of 32 symbols, any alphabet: the slot's entry and the level by gathers. */
__attribute__((target("avx2,popcnt"))) static int32_t
wide_avx2_table(wide_lanes *w, int64_t steps, const wide_model_t *m, const uint32_t *levels,
                uint32_t *dst) {
    const uint16_t *p = w->p, *end = w->end;
    int short_ = 0;
    __m256i x[4];
    for (int v = 0; v < 4; v++) x[v] = _mm256_loadu_si256((const __m256i *)(w->x + 8 * v));
    const __m256i low12 = _mm256_set1_epi32(0xFFF), one = _mm256_set1_epi32(1);
    const __m256i zero = _mm256_setzero_si256();
    for (int64_t t = 0; t < steps; t++) {
        for (int v = 0; v < 4; v++) {
            __m256i e = _mm256_i32gather_epi32((const int *)m->slots,
                                               _mm256_and_si256(x[v], low12), 4);
            __m256i f = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 12), low12), one);
            __m256i y = _mm256_add_epi32(
                _mm256_mullo_epi32(f, _mm256_srli_epi32(x[v], WIDE_PRECISION)),
                _mm256_and_si256(e, low12));
            _mm256_storeu_si256(
                (__m256i *)(dst + 32 * t + 8 * v),
                _mm256_i32gather_epi32((const int *)levels, _mm256_srli_epi32(e, 24), 4));
            __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(y, 16), zero);
            x[v] = wide_refill(y, need, &p, end, &short_);
            if (short_) return 1;
        }
    }
    for (int v = 0; v < 4; v++) _mm256_storeu_si256((__m256i *)(w->x + 8 * v), x[v]);
    w->p = p;
    return 0;
}

/* `steps` steps of 32 symbols with AVX-512, alphabets of at most 32: two vectors of 16
 * lanes; the symbol by a branch-free binary search over the starts held in two registers, its
 * frequency, start and level by register permutes (vpermi2d), a vector's refills by one
 * expanding load of 16-bit words (vpexpandw, which reads only the words it takes). No
 * gathers: where the processor carries the gather data sampling mitigation (Intel up to Ice
 * Lake, as clouds ship them) an eight-lane gather costs about 24 cycles, and the table
 * decoder takes two per eight symbols. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,popcnt"))) static int32_t
wide_avx512(wide_lanes *w, int64_t steps, const wide_model_t *m, const uint32_t *levels,
            uint32_t *dst) {
    const uint16_t *p = w->p, *end = w->end;
    __m512i x[2] = {_mm512_loadu_si512((const void *)w->x),
                    _mm512_loadu_si512((const void *)(w->x + 16))};
    uint32_t bound[32]; /* bound[j] = the start of symbol j + 1 (past the last: 2^12) */
    for (int j = 0; j < 32; j++) bound[j] = j + 1 < m->alphabet ? m->cum32[j + 1] : WIDE_TOTAL;
    const __m512i b0 = _mm512_loadu_si512((const void *)bound);
    const __m512i b1 = _mm512_loadu_si512((const void *)(bound + 16));
    const __m512i f0 = _mm512_loadu_si512((const void *)m->freq32);
    const __m512i f1 = _mm512_loadu_si512((const void *)(m->freq32 + 16));
    const __m512i c0 = _mm512_loadu_si512((const void *)m->cum32);
    const __m512i c1 = _mm512_loadu_si512((const void *)(m->cum32 + 16));
    const __m512i v0 = _mm512_loadu_si512((const void *)levels); /* levels: 256 entries */
    const __m512i v1 = _mm512_loadu_si512((const void *)(levels + 16));
    const __m512i low12 = _mm512_set1_epi32(WIDE_TOTAL - 1), floor = _mm512_set1_epi32(WIDE_LOW);
    int32_t top = 1; /* the search's first step: the largest power of two <= alphabet - 1 */
    while (top * 2 <= m->alphabet - 1) top *= 2;
    for (int64_t t = 0; t < steps; t++) {
        for (int v = 0; v < 2; v++) {
            __m512i slot = _mm512_and_si512(x[v], low12), sym = _mm512_setzero_si512();
            for (int32_t h = top; h; h >>= 1) { /* sym += h where bound[sym + h - 1] <= slot */
                __m512i probe = _mm512_permutex2var_epi32(
                    b0, _mm512_add_epi32(sym, _mm512_set1_epi32(h - 1)), b1);
                sym = _mm512_mask_add_epi32(sym, _mm512_cmple_epu32_mask(probe, slot), sym,
                                            _mm512_set1_epi32(h));
            }
            __m512i f = _mm512_permutex2var_epi32(f0, sym, f1);
            __m512i c = _mm512_permutex2var_epi32(c0, sym, c1);
            __m512i y = _mm512_add_epi32(
                _mm512_mullo_epi32(f, _mm512_srli_epi32(x[v], WIDE_PRECISION)),
                _mm512_sub_epi32(slot, c));
            _mm512_storeu_si512((void *)(dst + 32 * t + 16 * v),
                                _mm512_permutex2var_epi32(v0, sym, v1));
            __mmask16 need = _mm512_cmplt_epu32_mask(y, floor);
            int take = __builtin_popcount((unsigned)need);
            if (end - p < take) return 1;
            __m512i words = _mm512_cvtepu16_epi32(_mm256_maskz_expandloadu_epi16(need, p));
            p += take;
            x[v] = _mm512_mask_or_epi32(y, need, _mm512_slli_epi32(y, 16), words);
        }
    }
    _mm512_storeu_si512((void *)w->x, x[0]);
    _mm512_storeu_si512((void *)(w->x + 16), x[1]);
    w->p = p;
    return 0;
}
#endif

/* k symbols (k a multiple of 32 but for a block's last call), the first in lane 0: the
 * vector decoder where there is one, the scalar step for the rest. */
static int32_t wide_run(wide_lanes *w, int64_t k, const wide_model_t *m,
                        const uint32_t *levels, uint32_t *dst) {
    int64_t done = 0;
#ifdef CKZ_WIDE_X86
    if (ckz_avx2_ok()) {
        int64_t steps = k / WIDE_LANES;
        /* CKPTZIP_NO_AVX512: the AVX2 decoders; CKPTZIP_NO_AVX2: the scalar loop */
        int32_t bad = m->alphabet <= 32 && ckz_avx512_ok()
                          ? wide_avx512(w, steps, m, levels, dst)
                      : m->alphabet <= 16 ? wide_avx2_compare(w, steps, m, levels, dst)
                                          : wide_avx2_table(w, steps, m, levels, dst);
        if (bad) return bad;
        done = steps * WIDE_LANES;
    }
#endif
    return wide_scalar(w, k - done, m, levels, dst + done);
}

/* Opens block b's decoder: its words, and the lanes' states from the first 64 of them.
 * Returns 0, or 1 when the block holds fewer words than its states. */
static int32_t wide_open(wide_lanes *w, const uint16_t *words, const int64_t *starts, int64_t b) {
    w->p = words + starts[b];
    w->end = words + starts[b + 1];
    if (w->end - w->p < 2 * WIDE_LANES) return 1;
    for (int l = 0; l < WIDE_LANES; l++, w->p += 2) w->x[l] = w->p[0] | (uint32_t)w->p[1] << 16;
    return 0;
}

/* 1 unless the block's decoder read exactly its words and left every lane in its initial
 * state, else 0 */
static int32_t wide_close(const wide_lanes *w) {
    if (w->p != w->end) return 1;
    for (int l = 0; l < WIDE_LANES; l++)
        if (w->x[l] != WIDE_LOW) return 1;
    return 0;
}

/* Blocks [b_lo, b_hi) into out: the symbols (table NULL, out uint8) or table[symbol] (table
 * of 256 entries of size 2, 4 or 8 bytes), added to base when it is not NULL (as
 * ckz_put_levels adds). starts[b] .. starts[b + 1] are block b's words. Returns 0, or 1 when
 * a block's words do not decode to exactly its symbols (too few, words left over, or a lane
 * that does not end in its initial state). */
CKZ_API int32_t ckz_wide_decode(const uint16_t *words, const int64_t *starts, int64_t n,
                                const uint32_t *counts, int32_t alphabet, int64_t block,
                                int64_t b_lo, int64_t b_hi, const void *table, int32_t size,
                                const void *base, void *out) {
    uint32_t freq[256], cum[257], buf[WIDE_CHUNK], identity[256];
    uint8_t chunk[WIDE_CHUNK];
    if (alphabet < 1 || alphabet > 256 || block < WIDE_LANES || block % WIDE_LANES) return 1;
    int32_t only = wide_model(counts, alphabet, freq, cum);
    if (only >= 0) {
        for (int64_t b = b_lo; b < b_hi; b++) {
            int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
            if (starts[b + 1] != starts[b]) return 1;
            ckz_fill_levels(only, hi - lo, table, size, base, out, lo);
        }
        return 0;
    }
    wide_model_t *m = malloc(sizeof *m);
    if (m == NULL) return -1;
    wide_decoder_model(freq, cum, alphabet, m);
    /* table[symbol] straight into a float32/int32 tensor; else the symbols, then put */
    int direct = table != NULL && size == 4 && base == NULL;
    const uint32_t *levels = direct ? (const uint32_t *)table : identity;
    for (int s = 0; s < 256; s++) identity[s] = (uint32_t)s;
    int32_t status = 0;
    for (int64_t b = b_lo; b < b_hi && status == 0; b++) {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        wide_lanes w;
        if ((status = wide_open(&w, words, starts, b)) != 0) break;
        for (int64_t at = lo; at < hi && status == 0; at += WIDE_CHUNK) {
            int64_t k = hi - at < WIDE_CHUNK ? hi - at : WIDE_CHUNK;
            uint32_t *dst = direct ? (uint32_t *)out + at : buf;
            status = wide_run(&w, k, m, levels, dst);
            if (status || direct) continue;
            for (int64_t j = 0; j < k; j++) chunk[j] = (uint8_t)buf[j];
            ckz_put_levels(chunk, k, table, size, base, out, at);
        }
        if (status == 0) status = wide_close(&w);
    }
    free(m);
    return status;
}

/* -- contexts: "ans-wide-ctx" -------------------------------------------------------------
 *
 * The same 32 lanes, blocks and words, for a stream cut into contiguous contexts (the delta
 * codec's groups by parent bin: symbols bounds[c] .. bounds[c + 1] - 1 are context c), each
 * with its own static model. Symbol i still belongs to lane (i - block start) mod 32 and takes
 * its own context's model, so the lanes switch models where the contexts change, inside a
 * step if a boundary falls there. A context's model covers only the symbols it holds (count
 * > 0): ckz_ans_left over them, in symbol order, at 12 bits; the others have frequency 0. A
 * context holding one symbol (or none) codes nothing: its positions leave their lanes'
 * states alone, and the decoder writes the symbol. Every block starts with its 32 final
 * states (as in "ans-wide"), even where it codes nothing.
 *
 * Whole steps inside one context run the single-model loops above (the vector encoder and
 * decoders with that context's model in registers); a step a boundary cuts runs lane by lane.
 * Contexts are at least a step long where it matters (a delta's parent bins hold thousands
 * of weights), so the lane-by-lane steps are a few per boundary. */

typedef struct {
    uint32_t freq[256], cum[257];
    int32_t only; /* >= 0: the one symbol the context holds (0 when it holds none) */
} ctx_model;

static void ctx_model_build(const uint32_t *counts, int32_t alphabet, ctx_model *m) {
    uint32_t packed[256], left[257];
    int32_t used[256], k = 0;
    memset(m->freq, 0, sizeof m->freq);
    memset(m->cum, 0, sizeof m->cum);
    m->only = ckz_only_symbol(counts, alphabet);
    if (m->only >= 0) return;
    for (int32_t s = 0; s < alphabet; s++)
        if (counts[s]) used[k] = s, packed[k++] = counts[s];
    ckz_ans_left(packed, k, WIDE_TOTAL, left);
    for (int32_t j = 0; j < k; j++) m->freq[used[j]] = left[j + 1] - left[j];
    uint32_t c = 0;
    for (int32_t s = 0; s <= 256; s++) {
        m->cum[s] = c;
        if (s < 256) c += m->freq[s];
    }
}

/* the models of every context; NULL when out of memory */
static ctx_model *ctx_models(const uint32_t *counts, int32_t contexts, int32_t alphabet) {
    ctx_model *m = malloc((size_t)contexts * sizeof *m);
    if (m == NULL) return NULL;
    for (int32_t c = 0; c < contexts; c++)
        ctx_model_build(counts + (size_t)c * (size_t)alphabet, alphabet, m + c);
    return m;
}

/* the context of position i: the last c with bounds[c] <= i (bounds[0] = 0 <= i < n) */
static int32_t ctx_of(const int64_t *bounds, int32_t contexts, int64_t i) {
    int32_t lo = 0, hi = contexts; /* bounds[lo] <= i < bounds[hi] */
    while (hi - lo > 1) {
        int32_t mid = lo + (hi - lo) / 2;
        if (bounds[mid] <= i) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* bounds: contexts + 1 offsets from 0 to n, non-decreasing */
static int ctx_bounds_ok(const int64_t *bounds, int32_t contexts, int64_t n) {
    if (contexts < 1 || bounds[0] != 0 || bounds[contexts] != n) return 0;
    for (int32_t c = 0; c < contexts; c++)
        if (bounds[c + 1] < bounds[c]) return 0;
    return 1;
}

/* Blocks [b_lo, b_hi) of the stream, as ckz_wide_encode lays them out; counts holds
 * `contexts` rows of `alphabet`. Returns 0, -1 on arguments out of range, -2 out of memory. */
CKZ_API int32_t ckz_wide_ctx_encode(const uint8_t *sym, int64_t n, const int64_t *bounds,
                                    int32_t contexts, const uint32_t *counts, int32_t alphabet,
                                    int64_t block, int64_t b_lo, int64_t b_hi,
                                    uint16_t *scratch, int64_t cap, int64_t *lengths) {
    if (alphabet < 1 || alphabet > 256 || block < WIDE_LANES || block % WIDE_LANES ||
        !ctx_bounds_ok(bounds, contexts, n))
        return -1;
    ctx_model *models = ctx_models(counts, contexts, alphabet);
    if (models == NULL) return -2;
#ifdef CKZ_WIDE_X86
    int vector = alphabet <= 32 && ckz_avx2_ok() && ckz_avx512_ok();
#endif
    int32_t status = 0;
    for (int64_t b = b_lo; b < b_hi; b++) {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        lengths[b] = 0;
        if (hi <= lo) continue;
        if (hi - lo + 2 * WIDE_LANES > cap) {
            status = -1;
            break;
        }
        uint16_t *row = scratch + (size_t)b * (size_t)cap, *end = row + cap, *ptr = end;
        uint32_t x[WIDE_LANES];
        for (int l = 0; l < WIDE_LANES; l++) x[l] = WIDE_LOW;
        int32_t c = ctx_of(bounds, contexts, hi - 1); /* moves down with the steps */
        for (int64_t at = lo + (hi - lo - 1) / WIDE_LANES * WIDE_LANES; at >= lo;) {
            int top = hi - at < WIDE_LANES ? (int)(hi - at) : WIDE_LANES;
            while (bounds[c] > at + top - 1) c--;
            if (top == WIDE_LANES && bounds[c] <= at) {
                /* whole steps inside context c: down to the first at or above its start */
                int64_t floor_ = bounds[c] > lo ? bounds[c] : lo;
                int64_t first = at - (at - floor_) / WIDE_LANES * WIDE_LANES;
                const ctx_model *m = models + c;
                if (m->only < 0) {
#ifdef CKZ_WIDE_X86
                    if (vector) {
                        ptr = wide_encode_avx512(sym, first, at, x, m->freq, m->cum, ptr);
                    } else
#endif
                        for (int64_t s = at; s >= first; s -= WIDE_LANES)
                            ptr = wide_encode_step(sym + s, WIDE_LANES, x, m->freq, m->cum, ptr);
                }
                at = first - WIDE_LANES;
                continue;
            }
            /* a step a boundary cuts (or the block's partial last one): lane by lane, down */
            for (int l = top - 1; l >= 0; l--) {
                while (bounds[c] > at + l) c--;
                const ctx_model *m = models + c;
                if (m->only >= 0) continue;
                ptr = wide_encode_step(sym + at + l, 1, x + l, m->freq, m->cum, ptr);
            }
            at -= WIDE_LANES;
        }
        for (int l = WIDE_LANES - 1; l >= 0; l--) {
            *--ptr = (uint16_t)(x[l] >> 16);
            *--ptr = (uint16_t)x[l];
        }
        int64_t used = end - ptr;
        memmove(row, ptr, (size_t)used * sizeof *row);
        lengths[b] = used;
    }
    free(models);
    return status;
}

/* One lane's decoder step under model m (two or more symbols): the symbol, or -1 where the
 * words run out. The symbol by a binary search over the starts (the first s with
 * cum[s + 1] > slot, which has a frequency). */
static inline int32_t ctx_lane_step(uint32_t *x, const ctx_model *m, int32_t alphabet,
                                    const uint16_t **p, const uint16_t *end) {
    uint32_t v = *x, slot = v & (WIDE_TOTAL - 1);
    int32_t lo = 0, hi = alphabet - 1; /* cum[lo] <= slot < cum[hi + 1] */
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (m->cum[mid + 1] > slot) hi = mid;
        else lo = mid + 1;
    }
    uint32_t y = m->freq[lo] * (v >> WIDE_PRECISION) + slot - m->cum[lo];
    if (y < WIDE_LOW) {
        if (*p == end) return -1;
        y = y << 16 | *(*p)++;
    }
    *x = y;
    return lo;
}

/* Blocks [b_lo, b_hi) into out (uint8 symbols); starts[b] .. starts[b + 1] are block b's
 * words. Returns 0, 1 when a block's words do not decode to exactly its symbols (too few,
 * left over, a lane that does not end in its initial state), -1 on arguments out of range,
 * -2 out of memory. */
CKZ_API int32_t ckz_wide_ctx_decode(const uint16_t *words, const int64_t *starts, int64_t n,
                                    const int64_t *bounds, int32_t contexts,
                                    const uint32_t *counts, int32_t alphabet, int64_t block,
                                    int64_t b_lo, int64_t b_hi, uint8_t *out) {
    uint32_t buf[WIDE_CHUNK], identity[256];
    if (alphabet < 1 || alphabet > 256 || block < WIDE_LANES || block % WIDE_LANES ||
        !ctx_bounds_ok(bounds, contexts, n))
        return -1;
    ctx_model *models = ctx_models(counts, contexts, alphabet);
    /* the single-model decoders' form of each context, built when a context first runs whole
     * steps */
    wide_model_t *wide = calloc((size_t)contexts, sizeof *wide);
    if (models == NULL || wide == NULL) {
        free(models);
        free(wide);
        return -2;
    }
    for (int s = 0; s < 256; s++) identity[s] = (uint32_t)s;
    /* whether wide_run's vector decoder reads the model from registers only: then no slot
     * table is filled (16 KB a context, a visible cost on a stream of 2^16 symbols) */
    int registers = 0;
#ifdef CKZ_WIDE_X86
    registers = ckz_avx2_ok() && ((alphabet <= 32 && ckz_avx512_ok()) || alphabet <= 16);
#endif
    int32_t status = 0;
    for (int64_t b = b_lo; b < b_hi && status == 0; b++) {
        int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
        wide_lanes w;
        if ((status = wide_open(&w, words, starts, b)) != 0) break;
        int32_t c = ctx_of(bounds, contexts, lo); /* moves up with the steps */
        for (int64_t at = lo; at < hi && status == 0;) {
            int top = hi - at < WIDE_LANES ? (int)(hi - at) : WIDE_LANES;
            while (bounds[c + 1] <= at) c++;
            const ctx_model *m = models + c;
            if (top == WIDE_LANES && bounds[c + 1] >= at + WIDE_LANES) {
                int64_t stop = bounds[c + 1] < hi ? bounds[c + 1] : hi;
                int64_t k = (stop - at) / WIDE_LANES * WIDE_LANES;
                if (k > WIDE_CHUNK) k = WIDE_CHUNK;
                if (m->only >= 0) {
                    memset(out + at, m->only, (size_t)k);
                } else {
                    wide_model_t *wm = wide + c;
                    if (wm->alphabet == 0) {
                        if (registers) wide_register_model(m->freq, m->cum, alphabet, wm);
                        else wide_decoder_model(m->freq, m->cum, alphabet, wm);
                    }
                    status = wide_run(&w, k, wm, identity, buf);
                    for (int64_t j = 0; j < k; j++) out[at + j] = (uint8_t)buf[j];
                }
                at += k;
                continue;
            }
            for (int l = 0; l < top; l++) {
                while (bounds[c + 1] <= at + l) c++;
                m = models + c;
                if (m->only >= 0) {
                    out[at + l] = (uint8_t)m->only;
                    continue;
                }
                int32_t s = ctx_lane_step(w.x + l, m, alphabet, &w.p, w.end);
                if (s < 0) {
                    status = 1;
                    break;
                }
                out[at + l] = (uint8_t)s;
            }
            at += WIDE_LANES;
        }
        if (status == 0) status = wide_close(&w);
    }
    free(models);
    free(wide);
    return status;
}
