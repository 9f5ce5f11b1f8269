/* A prototype, not the library's format: 32 interleaved rANS states of 32 bits, 16-bit
 * refills, 12-bit precision, decoded by scalar C, AVX2 (4 x 8 lanes) and AVX-512 (2 x 16
 * lanes). It measures whether a format version with wider interleaving would decode faster
 * than the library's four 64-bit states (benchmarks/ans_wide.py drives it and compares).
 *
 * Position i belongs to lane i % 32. Two layouts: each lane's 16-bit words a stream of their
 * own (read forwards from its start), as the library's lanes are; or every lane's refills
 * interleaved into one stream in the order a decoder takes them (wide_encode_il, below),
 * which lets a vector of lanes refill by one contiguous load. A slot's table entry holds
 * the symbol (bits 24-31), its frequency - 1 (bits 12-23) and slot - cum[symbol]
 * (bits 0-11): a step is x = freq * (x >> 12) + bias, then one refill where x < 2^16. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define P 12
#define M (1u << P)
#define L (1u << 16)
#define LANES 32

/* One encoding step: state x takes a symbol of frequency f and start c, first pushing its
 * low 16 bits below *ptr where it would outgrow 32 bits. */
static inline uint32_t encode_step(uint32_t x, uint32_t f, uint32_t c, uint16_t **ptr) {
    if (x >= ((L >> P) << 16) * f) {
        *--*ptr = (uint16_t)x;
        x >>= 16;
    }
    return ((x / f) << P) + (x % f) + c;
}

/* The symbol of a slot for alphabets of at most 16: the count of starts at or below it. */
static inline int compare_symbol(uint32_t slot, const uint32_t *cum16, int32_t alphabet) {
    int s = 0;
    while (s + 1 < alphabet && cum16[s + 1] <= slot) s++;
    return s;
}

/* Each lane's words a stream of its own: the lanes' first states and the positions of their
 * next words. */
static void lanes_init(const uint16_t *words, const int64_t *start, uint32_t *xs,
                       int32_t *ats) {
    for (int l = 0; l < LANES; l++) {
        xs[l] = words[start[l]] | (uint32_t)words[start[l] + 1] << 16;
        ats[l] = (int32_t)start[l] + 2;
    }
}

/* The scalar steps of positions [i, n) on that layout, symbols by the slot table... */
static void lanes_tail_table(const uint16_t *words, uint32_t *restrict xs,
                             int32_t *restrict ats, int64_t i, int64_t n,
                             const uint32_t *table, const float *levels,
                             float *restrict out) {
    for (; i < n; i++) {
        int l = (int)(i % LANES);
        uint32_t e = table[xs[l] & (M - 1)];
        xs[l] = ((e >> 12 & 0xFFF) + 1) * (xs[l] >> P) + (e & 0xFFF);
        if (xs[l] < L) xs[l] = xs[l] << 16 | words[ats[l]++];
        out[i] = levels[e >> 24];
    }
}

/* ... or by compares (alphabets of at most 16). Not inlined: inlined into
 * wide_decode_avx512_cmp it took that decoder's vector loop from 0.9 to 1.7 ns a symbol. */
__attribute__((noinline)) static void lanes_tail_compare(
    const uint16_t *words, uint32_t *restrict xs, int32_t *restrict ats, int64_t i, int64_t n,
    const uint32_t *freq16, const uint32_t *cum16, int32_t alphabet, const float *levels,
    float *restrict out) {
    for (; i < n; i++) {
        int l = (int)(i % LANES);
        uint32_t slot = xs[l] & (M - 1);
        int s = compare_symbol(slot, cum16, alphabet);
        xs[l] = freq16[s] * (xs[l] >> P) + slot - cum16[s];
        if (xs[l] < L) xs[l] = xs[l] << 16 | words[ats[l]++];
        out[i] = levels[s];
    }
}

/* Encodes n symbols (freq/cum: the model, sum M, every used symbol freq >= 1) into
 * words; lane l's stream is words[start[l] .. start[l + 1]). Returns the word count, or -1
 * when cap is too small. */
int64_t wide_encode(const uint8_t *sym, int64_t n, const uint32_t *freq, const uint32_t *cum,
                    uint16_t *words, int64_t cap, int64_t *start) {
    int64_t at = 0;
    for (int l = 0; l < LANES; l++) {
        int64_t count = n > l ? (n - 1 - l) / LANES + 1 : 0;
        /* the worst case of one lane: one word a symbol, plus the flush */
        int64_t room = count + 2;
        if (at + room > cap) return -1;
        uint16_t *end = words + at + room, *ptr = end;
        uint32_t x = L;
        for (int64_t k = count - 1; k >= 0; k--) {
            uint8_t s = sym[l + k * LANES];
            x = encode_step(x, freq[s], cum[s], &ptr);
        }
        *--ptr = (uint16_t)(x >> 16);
        *--ptr = (uint16_t)x;
        int64_t used = end - ptr;
        memmove(words + at, ptr, (size_t)used * 2);
        start[l] = at;
        at += used;
    }
    start[LANES] = at;
    return at;
}

void wide_table(const uint32_t *freq, const uint32_t *cum, int alphabet, uint32_t *table) {
    for (int s = 0; s < alphabet; s++)
        for (uint32_t k = 0; k < freq[s]; k++)
            table[cum[s] + k] = (uint32_t)s << 24 | (freq[s] - 1) << 12 | k;
}

/* out[i] = levels[symbol i] */
/* Its own loop, not lanes_tail_table's over lanes_init's arrays: through those (int32
 * positions behind pointers) this decoder measured about 6 % slower. */
void wide_decode_scalar(const uint16_t *words, const int64_t *start, int64_t n,
                        const uint32_t *table, const float *levels, float *out) {
    uint32_t x[LANES];
    int64_t at[LANES];
    for (int l = 0; l < LANES; l++) {
        x[l] = words[start[l]] | (uint32_t)words[start[l] + 1] << 16;
        at[l] = start[l] + 2;
    }
    for (int64_t i = 0; i < n; i++) {
        int l = (int)(i % LANES);
        uint32_t e = table[x[l] & (M - 1)];
        x[l] = ((e >> 12 & 0xFFF) + 1) * (x[l] >> P) + (e & 0xFFF);
        if (x[l] < L) x[l] = x[l] << 16 | words[at[l]++];
        out[i] = levels[e >> 24];
    }
}

__attribute__((target("avx2"))) void wide_decode_avx2(const uint16_t *words,
                                                        const int64_t *start, int64_t n,
                                                        const uint32_t *table,
                                                        const float *levels, float *out) {
    uint32_t xs[LANES];
    int32_t ats[LANES];
    lanes_init(words, start, xs, ats);
    __m256i x[4], at[4];
    for (int v = 0; v < 4; v++) {
        x[v] = _mm256_loadu_si256((const __m256i *)(xs + v * 8));
        at[v] = _mm256_loadu_si256((const __m256i *)(ats + v * 8));
    }
    const __m256i low12 = _mm256_set1_epi32(0xFFF), one = _mm256_set1_epi32(1);
    const __m256i low16 = _mm256_set1_epi32(0xFFFF), zero = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int v = 0; v < 4; v++) {
            __m256i e = _mm256_i32gather_epi32((const int *)table, _mm256_and_si256(x[v], low12), 4);
            __m256i f = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 12), low12), one);
            __m256i y = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(x[v], P)),
                                         _mm256_and_si256(e, low12));
            __m256 lv = _mm256_i32gather_ps(levels, _mm256_srli_epi32(e, 24), 4);
            _mm256_storeu_ps(out + i + v * 8, lv);
            __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(y, 16), zero);
            __m256i w = _mm256_mask_i32gather_epi32(zero, (const int *)words, at[v], need, 2);
            __m256i refilled = _mm256_or_si256(_mm256_slli_epi32(y, 16), _mm256_and_si256(w, low16));
            x[v] = _mm256_blendv_epi8(y, refilled, need);
            at[v] = _mm256_sub_epi32(at[v], need);
        }
    }
    /* the tail: the scalar step, lane by lane */
    for (int v = 0; v < 4; v++) {
        _mm256_storeu_si256((__m256i *)(xs + v * 8), x[v]);
        _mm256_storeu_si256((__m256i *)(ats + v * 8), at[v]);
    }
    lanes_tail_table(words, xs, ats, i, n, table, levels, out);
}

__attribute__((target("avx512f"))) void wide_decode_avx512(const uint16_t *words,
                                                             const int64_t *start, int64_t n,
                                                             const uint32_t *table,
                                                             const float *levels, float *out) {
    uint32_t xs[LANES];
    int32_t ats[LANES];
    lanes_init(words, start, xs, ats);
    __m512i x[2], at[2];
    for (int v = 0; v < 2; v++) {
        x[v] = _mm512_loadu_si512(xs + v * 16);
        at[v] = _mm512_loadu_si512(ats + v * 16);
    }
    const __m512i low12 = _mm512_set1_epi32(0xFFF), one = _mm512_set1_epi32(1);
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int v = 0; v < 2; v++) {
            __m512i e = _mm512_i32gather_epi32(_mm512_and_si512(x[v], low12), table, 4);
            __m512i f = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(e, 12), low12), one);
            __m512i y = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srli_epi32(x[v], P)),
                                         _mm512_and_si512(e, low12));
            /* levels of at most 16 entries: a register permute instead of a gather */
            __m512 lv = _mm512_permutexvar_ps(_mm512_srli_epi32(e, 24), _mm512_loadu_ps(levels));
            _mm512_storeu_ps(out + i + v * 16, lv);
            __mmask16 need = _mm512_cmplt_epu32_mask(y, _mm512_set1_epi32((int)L));
            __m512i w = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), need, at[v], words, 2);
            x[v] = _mm512_mask_or_epi32(y, need, _mm512_slli_epi32(y, 16), _mm512_and_si512(w, low16));
            at[v] = _mm512_mask_add_epi32(at[v], need, at[v], one);
        }
    }
    for (int v = 0; v < 2; v++) {
        _mm512_storeu_si512(xs + v * 16, x[v]);
        _mm512_storeu_si512(ats + v * 16, at[v]);
    }
    lanes_tail_table(words, xs, ats, i, n, table, levels, out);
}

/* AVX-512 for alphabets of at most 16 symbols without the table gather: the symbol is the
 * count of cumulative starts at or below the slot, its frequency and start come from
 * register permutes. freq16 / cum16 hold 16 entries (zero past the alphabet). */
__attribute__((target("avx512f"))) void wide_decode_avx512_cmp(
    const uint16_t *words, const int64_t *start, int64_t n, const uint32_t *freq16,
    const uint32_t *cum16, int32_t alphabet, const float *levels, float *out) {
    uint32_t xs[LANES];
    int32_t ats[LANES];
    lanes_init(words, start, xs, ats);
    __m512i x[2], at[2];
    for (int v = 0; v < 2; v++) {
        x[v] = _mm512_loadu_si512(xs + v * 16);
        at[v] = _mm512_loadu_si512(ats + v * 16);
    }
    const __m512i low12 = _mm512_set1_epi32(0xFFF), one = _mm512_set1_epi32(1);
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    const __m512i F = _mm512_loadu_si512(freq16), C = _mm512_loadu_si512(cum16);
    const __m512 LV = _mm512_loadu_ps(levels);
    __m512i bound[16];
    for (int k = 1; k < alphabet; k++) bound[k] = _mm512_set1_epi32((int)cum16[k]);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int v = 0; v < 2; v++) {
            __m512i slot = _mm512_and_si512(x[v], low12);
            __m512i sym = _mm512_setzero_si512();
            for (int k = 1; k < alphabet; k++)
                sym = _mm512_mask_add_epi32(sym, _mm512_cmpge_epu32_mask(slot, bound[k]), sym, one);
            __m512i f = _mm512_permutexvar_epi32(sym, F);
            __m512i c = _mm512_permutexvar_epi32(sym, C);
            __m512i y = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srli_epi32(x[v], P)),
                                         _mm512_sub_epi32(slot, c));
            _mm512_storeu_ps(out + i + v * 16, _mm512_permutexvar_ps(sym, LV));
            __mmask16 need = _mm512_cmplt_epu32_mask(y, _mm512_set1_epi32((int)L));
            __m512i w = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), need, at[v], words, 2);
            x[v] = _mm512_mask_or_epi32(y, need, _mm512_slli_epi32(y, 16), _mm512_and_si512(w, low16));
            at[v] = _mm512_mask_add_epi32(at[v], need, at[v], one);
        }
    }
    for (int v = 0; v < 2; v++) {
        _mm512_storeu_si512(xs + v * 16, x[v]);
        _mm512_storeu_si512(ats + v * 16, at[v]);
    }
    lanes_tail_compare(words, xs, ats, i, n, freq16, cum16, alphabet, levels, out);
}

/* -- the lanes' refill words interleaved into one stream ----------------------------------
 *
 * The same coder, one stream: the 32 initial states first (lane order, low word first),
 * then every refill word in the order a decoder takes them, step by step and lane by lane
 * within a step. The encoder goes backwards (last step first, last lane first) and writes
 * backwards, so a decoder reads forwards, and a vector of lanes takes its refills as one
 * contiguous run: an expanding load instead of a gather. Returns the word count, or -1. */
int64_t wide_encode_il(const uint8_t *sym, int64_t n, const uint32_t *freq,
                       const uint32_t *cum, uint16_t *words, int64_t cap) {
    if (cap < n + 2 * LANES) return -1;
    uint16_t *end = words + cap, *ptr = end;
    uint32_t x[LANES];
    for (int l = 0; l < LANES; l++) x[l] = L;
    for (int64_t t = (n + LANES - 1) / LANES - 1; t >= 0; t--) {
        for (int l = LANES - 1; l >= 0; l--) {
            int64_t pos = t * LANES + l;
            if (pos >= n) continue;
            x[l] = encode_step(x[l], freq[sym[pos]], cum[sym[pos]], &ptr);
        }
    }
    for (int l = LANES - 1; l >= 0; l--) {
        *--ptr = (uint16_t)(x[l] >> 16);
        *--ptr = (uint16_t)x[l];
    }
    int64_t used = end - ptr;
    memmove(words, ptr, (size_t)used * 2);
    return used;
}

/* The interleaved decoders check their reads against the stream's nwords words, as a real
 * decoder must (the caller pads the buffer: the vector loads read past the stream's end), and
 * return 0, 1 where the stream ends early, or 2 where words are left after the last symbol. */
static const uint16_t *il_init(const uint16_t *p, uint32_t *xs) {
    for (int l = 0; l < LANES; l++, p += 2) xs[l] = p[0] | (uint32_t)p[1] << 16;
    return p;
}

/* The scalar steps of positions [i, n) on the interleaved layout, from word p of a stream
 * ending at end, symbols by the slot table... */
static int32_t il_tail_table(const uint16_t *p, const uint16_t *end, uint32_t *xs, int64_t i,
                             int64_t n, const uint32_t *table, const float *levels,
                             float *out) {
    for (; i < n; i++) {
        int l = (int)(i % LANES);
        uint32_t e = table[xs[l] & (M - 1)];
        xs[l] = ((e >> 12 & 0xFFF) + 1) * (xs[l] >> P) + (e & 0xFFF);
        if (xs[l] < L) {
            if (p == end) return 1;
            xs[l] = xs[l] << 16 | *p++;
        }
        out[i] = levels[e >> 24];
    }
    return p == end ? 0 : 2;
}

/* ... or by compares (alphabets of at most 16). */
static int32_t il_tail_compare(const uint16_t *p, const uint16_t *end, uint32_t *xs,
                               int64_t i, int64_t n, const uint32_t *freq16,
                               const uint32_t *cum16, int32_t alphabet, const float *levels,
                               float *out) {
    for (; i < n; i++) {
        int l = (int)(i % LANES);
        uint32_t slot = xs[l] & (M - 1);
        int s = compare_symbol(slot, cum16, alphabet);
        xs[l] = freq16[s] * (xs[l] >> P) + slot - cum16[s];
        if (xs[l] < L) {
            if (p == end) return 1;
            xs[l] = xs[l] << 16 | *p++;
        }
        out[i] = levels[s];
    }
    return p == end ? 0 : 2;
}

int32_t wide_decode_il_scalar(const uint16_t *words, int64_t nwords, int64_t n,
                              const uint32_t *table, const float *levels, float *out) {
    uint32_t xs[LANES];
    if (nwords < 2 * LANES) return 1;
    const uint16_t *p = il_init(words, xs);
    return il_tail_table(p, words + nwords, xs, 0, n, table, levels, out);
}

/* AVX-512 (with VBMI2 and BMI2) for alphabets of at most 16 symbols: the symbol by
 * compares, frequency, start and level by register permutes, the refills of a vector by one
 * expanding load of 16-bit words into the low halves of its lanes. */
__attribute__((target("avx512f,avx512bw,avx512vbmi2,bmi2,popcnt"))) int32_t wide_decode_il_avx512(
    const uint16_t *words, int64_t nwords, int64_t n, const uint32_t *freq16,
    const uint32_t *cum16, int32_t alphabet, const float *levels, float *out) {
    uint32_t xs[LANES];
    if (nwords < 2 * LANES) return 1;
    const uint16_t *p = il_init(words, xs), *end = words + nwords;
    __m512i x[2];
    for (int v = 0; v < 2; v++) x[v] = _mm512_loadu_si512(xs + v * 16);
    const __m512i low12 = _mm512_set1_epi32(0xFFF), one = _mm512_set1_epi32(1);
    const __m512i F = _mm512_loadu_si512(freq16), C = _mm512_loadu_si512(cum16);
    const __m512 LV = _mm512_loadu_ps(levels);
    __m512i bound[16];
    for (int k = 1; k < alphabet; k++) bound[k] = _mm512_set1_epi32((int)cum16[k]);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int v = 0; v < 2; v++) {
            __m512i slot = _mm512_and_si512(x[v], low12);
            __m512i sym = _mm512_setzero_si512();
            for (int k = 1; k < alphabet; k++)
                sym = _mm512_mask_add_epi32(sym, _mm512_cmpge_epu32_mask(slot, bound[k]), sym, one);
            __m512i f = _mm512_permutexvar_epi32(sym, F);
            __m512i c = _mm512_permutexvar_epi32(sym, C);
            __m512i y = _mm512_add_epi32(_mm512_mullo_epi32(f, _mm512_srli_epi32(x[v], P)),
                                         _mm512_sub_epi32(slot, c));
            _mm512_storeu_ps(out + i + v * 16, _mm512_permutexvar_ps(sym, LV));
            __mmask16 need = _mm512_cmplt_epu32_mask(y, _mm512_set1_epi32((int)L));
            __mmask32 halves = _pdep_u32(need, 0x55555555u);
            int take = __builtin_popcount(need);
            if (end - p < take) return 1;
            __m512i w = _mm512_maskz_expandloadu_epi16(halves, p);
            p += take;
            x[v] = _mm512_mask_or_epi32(y, need, _mm512_slli_epi32(y, 16), w);
        }
    }
    for (int v = 0; v < 2; v++) _mm512_storeu_si512(xs + v * 16, x[v]);
    return il_tail_compare(p, end, xs, i, n, freq16, cum16, alphabet, levels, out);
}

/* AVX2 for alphabets of at most 16 symbols on the interleaved layout: the symbol by
 * compares, frequency, start and level by two 8-entry permutes and a blend, a vector's
 * refills by one 16-byte load spread over its lanes by a byte shuffle from a 256-entry
 * table (AVX2 has no expanding load). The caller gives words 8 readable entries past the
 * stream's end (the load reads 16 bytes). */
static uint8_t expand16[256][16];

static void expand16_init(void) {
    static int done = 0;
    if (done) return;
    for (int m = 0; m < 256; m++) {
        int k = 0;
        for (int i = 0; i < 8; i++) {
            if (m >> i & 1) {
                expand16[m][2 * i] = (uint8_t)(2 * k);
                expand16[m][2 * i + 1] = (uint8_t)(2 * k + 1);
                k++;
            } else {
                expand16[m][2 * i] = expand16[m][2 * i + 1] = 0x80;
            }
        }
    }
    done = 1;
}

__attribute__((target("avx2,popcnt"))) static inline __m256i lookup16(__m256i lo, __m256i hi,
                                                                        __m256i sym,
                                                                        __m256i seven) {
    return _mm256_blendv_epi8(_mm256_permutevar8x32_epi32(lo, sym),
                              _mm256_permutevar8x32_epi32(hi, sym),
                              _mm256_cmpgt_epi32(sym, seven));
}

__attribute__((target("avx2,popcnt"))) int32_t wide_decode_il_avx2(
    const uint16_t *words, int64_t nwords, int64_t n, const uint32_t *freq16,
    const uint32_t *cum16, int32_t alphabet, const float *levels, float *out) {
    expand16_init();
    uint32_t xs[LANES];
    if (nwords < 2 * LANES) return 1;
    const uint16_t *p = il_init(words, xs), *end = words + nwords;
    __m256i x[4];
    for (int v = 0; v < 4; v++) x[v] = _mm256_loadu_si256((const __m256i *)(xs + v * 8));
    const __m256i low12 = _mm256_set1_epi32(0xFFF), zero = _mm256_setzero_si256();
    const __m256i seven = _mm256_set1_epi32(7);
    const __m256i F0 = _mm256_loadu_si256((const __m256i *)freq16);
    const __m256i F1 = _mm256_loadu_si256((const __m256i *)(freq16 + 8));
    const __m256i C0 = _mm256_loadu_si256((const __m256i *)cum16);
    const __m256i C1 = _mm256_loadu_si256((const __m256i *)(cum16 + 8));
    const __m256i V0 = _mm256_loadu_si256((const __m256i *)levels);
    const __m256i V1 = _mm256_loadu_si256((const __m256i *)(levels + 8));
    __m256i bound[16];
    for (int k = 1; k < alphabet; k++) bound[k] = _mm256_set1_epi32((int)cum16[k] - 1);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int v = 0; v < 4; v++) {
            __m256i slot = _mm256_and_si256(x[v], low12), sym = zero;
            for (int k = 1; k < alphabet; k++)
                sym = _mm256_sub_epi32(sym, _mm256_cmpgt_epi32(slot, bound[k]));
            __m256i f = lookup16(F0, F1, sym, seven), c = lookup16(C0, C1, sym, seven);
            __m256i y = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(x[v], P)),
                                         _mm256_sub_epi32(slot, c));
            _mm256_storeu_si256((__m256i *)(out + i + v * 8), lookup16(V0, V1, sym, seven));
            __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(y, 16), zero);
            int m = _mm256_movemask_ps(_mm256_castsi256_ps(need));
            int take = __builtin_popcount((unsigned)m);
            if (end - p < take) return 1;
            __m128i w = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)p),
                                         _mm_loadu_si128((const __m128i *)expand16[m]));
            p += take;
            x[v] = _mm256_blendv_epi8(y, _mm256_or_si256(_mm256_slli_epi32(y, 16),
                                                         _mm256_cvtepu16_epi32(w)),
                                      need);
        }
    }
    for (int v = 0; v < 4; v++) _mm256_storeu_si256((__m256i *)(xs + v * 8), x[v]);
    return il_tail_compare(p, end, xs, i, n, freq16, cum16, alphabet, levels, out);
}

/* AVX2 on the interleaved layout for any alphabet (up to 256): the slot's table entry and
 * the level by gathers, refills as wide_decode_il_avx2. */
__attribute__((target("avx2,popcnt"))) int32_t wide_decode_il_avx2_table(
    const uint16_t *words, int64_t nwords, int64_t n, const uint32_t *table,
    const float *levels, float *out) {
    expand16_init();
    uint32_t xs[LANES];
    if (nwords < 2 * LANES) return 1;
    const uint16_t *p = il_init(words, xs), *end = words + nwords;
    __m256i x[4];
    for (int v = 0; v < 4; v++) x[v] = _mm256_loadu_si256((const __m256i *)(xs + v * 8));
    const __m256i low12 = _mm256_set1_epi32(0xFFF), one = _mm256_set1_epi32(1);
    const __m256i zero = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int v = 0; v < 4; v++) {
            __m256i e = _mm256_i32gather_epi32((const int *)table, _mm256_and_si256(x[v], low12), 4);
            __m256i f = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(e, 12), low12), one);
            __m256i y = _mm256_add_epi32(_mm256_mullo_epi32(f, _mm256_srli_epi32(x[v], P)),
                                         _mm256_and_si256(e, low12));
            _mm256_storeu_ps(out + i + v * 8,
                             _mm256_i32gather_ps(levels, _mm256_srli_epi32(e, 24), 4));
            __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(y, 16), zero);
            int m = _mm256_movemask_ps(_mm256_castsi256_ps(need));
            int take = __builtin_popcount((unsigned)m);
            if (end - p < take) return 1;
            __m128i w = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)p),
                                         _mm_loadu_si128((const __m128i *)expand16[m]));
            p += take;
            x[v] = _mm256_blendv_epi8(y, _mm256_or_si256(_mm256_slli_epi32(y, 16),
                                                         _mm256_cvtepu16_epi32(w)),
                                      need);
        }
    }
    for (int v = 0; v < 4; v++) _mm256_storeu_si256((__m256i *)(xs + v * 8), x[v]);
    return il_tail_table(p, end, xs, i, n, table, levels, out);
}
