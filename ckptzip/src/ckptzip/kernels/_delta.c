/* ckptzip's compiled kernels, delta part: the run-length split of rearranged bin
 * differences (the "rle+ans" symbol back end of ckptzip.entropy) and its inverse, and the
 * requantization of a tensor against its parent's codebook, each the exact twin of a
 * reference in ckptzip/kernels/_reference.py.
 *
 * Linked into the same library as _native.c (one extension, one ABI version: CKZ_ABI_VERSION
 * there); plain C99 over caller-owned buffers, called through ctypes, which releases the GIL.
 *
 * The form, per group (a contiguous part of the symbol stream: the differences of the
 * weights that were in one parent bin) and its base symbol (the group's most frequent
 * symbol, the smallest on a tie; 0 for an empty group): for each symbol other than the base,
 * the length r of the run of base symbols before it, and after the group's last such symbol
 * the length of the final run (so a non-empty group has others + 1 runs, an empty one none). A run r is the token r when
 * r < 16, else the token 16 + (bitlen(r) - 5) followed by the bitlen(r) - 1 bits of r below
 * its leading one, appended LSB first to one bit stream shared by the whole stream.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_search.h" /* ckz_count_below16: the requantization's search */

#if defined(_WIN32)
#define CKZ_API __declspec(dllexport)
#else
#define CKZ_API __attribute__((visibility("default")))
#endif

#define RLE_DIRECT 16
#define RLE_DIRECT_BITS 5 /* bitlen(RLE_DIRECT) */

static inline int bitlen64(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

static inline void put_bits(uint8_t *out, int64_t *pos, uint64_t v, int w) {
    /* out is zeroed by the caller; bits LSB first */
    int64_t p = *pos;
    for (int k = 0; k < w; k++, p++)
        if ((v >> k) & 1) out[p >> 3] |= (uint8_t)(1u << (p & 7));
    *pos = p;
}

static inline uint8_t run_token(uint64_t r, uint8_t *extra, int64_t *pos) {
    if (r < RLE_DIRECT) return (uint8_t)r;
    int b = bitlen64(r);
    put_bits(extra, pos, r, b - 1);
    return (uint8_t)(RLE_DIRECT + b - RLE_DIRECT_BITS);
}

CKZ_API void ckz_bin_counts(const uint8_t *prev, int64_t n, int64_t *groups);
CKZ_API void ckz_nearest(const float *v, int64_t n, const float *mids, int32_t n_mids,
                         uint8_t *out);

/* The first i' >= i below hi with sym[i'] != b (hi when none): eight bytes at a time. */
static inline int64_t skip_base(const uint8_t *sym, int64_t i, int64_t hi, uint8_t b) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t pattern = 0x0101010101010101ULL * b;
    for (; i + 8 <= hi; i += 8) {
        uint64_t w;
        memcpy(&w, sym + i, 8);
        w ^= pattern;
        if (w) return i + (__builtin_ctzll(w) >> 3); /* the lowest byte is the first */
    }
#endif
    while (i < hi && sym[i] == b) i++;
    return i;
}

CKZ_API int32_t ckz_avx512_ok(void); /* _native.c */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* One group's tokens and values from sym[i] (i < hi) on, 64 symbols at a time with AVX-512:
 * the positions of the symbols other than the base b, packed (vpcompressb of 0..63 under the
 * mask), give the runs between them as differences of neighbours; the symbols themselves are
 * packed the same way. A chunk's first run may be long (it carries on from the chunk
 * before: run_token writes its extra bits); a chunk holding another run of 16 or more goes
 * to the scalar loop, which then writes those runs' extra bits in order. Stops at the
 * group's last whole chunk; *last, *nt, *nv advanced as the scalar loop would. */
__attribute__((target("avx512f,avx512bw,avx512vbmi2,bmi2,lzcnt,popcnt"))) static int64_t
rle_group_avx512(const uint8_t *sym, int64_t i, int64_t hi, uint8_t b, int64_t *last,
                 uint8_t *tokens, int64_t *nt, uint8_t *values, int64_t *nv, uint8_t *extra,
                 int64_t *pos) {
    const __m512i vb = _mm512_set1_epi8((char)b), direct = _mm512_set1_epi8(RLE_DIRECT);
    const __m512i iota = _mm512_set_epi8(
        63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42,
        41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20,
        19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i one = _mm512_set1_epi8(1);
    for (; i + 64 <= hi; i += 64) {
        __m512i v = _mm512_loadu_si512((const void *)(sym + i));
        __mmask64 m = _mm512_cmpneq_epi8_mask(v, vb);
        if (!m) continue;
        uint32_t k = (uint32_t)_mm_popcnt_u64(m);
        __m512i at = _mm512_maskz_compress_epi8(m, iota); /* positions, ascending */
        /* runs between neighbours: at[j] - at[j - 1] - 1 for j >= 1 (at moved up a lane by
         * an expanding load into lanes 1..63) */
        __m512i runs =
            _mm512_sub_epi8(_mm512_sub_epi8(at, _mm512_maskz_expand_epi8(~1ULL, at)), one);
        __mmask64 lanes = _bzhi_u64(~0ULL, k) & ~1ULL;
        if (_mm512_mask_cmpge_epu8_mask(lanes, runs, direct)) {
            /* a long run inside the chunk: the scalar loop, in order */
            for (int64_t j = i; j < i + 64; j++) {
                if (sym[j] == b) continue;
                tokens[(*nt)++] = run_token((uint64_t)(j - *last), extra, pos);
                values[(*nv)++] = sym[j];
                *last = j + 1;
            }
            continue;
        }
        int64_t first = i + (int64_t)__builtin_ctzll(m);
        tokens[*nt] = run_token((uint64_t)(first - *last), extra, pos);
        _mm512_mask_storeu_epi8(tokens + *nt, lanes, runs); /* lane 0 stays the first run */
        _mm512_mask_storeu_epi8(values + *nv, _bzhi_u64(~0ULL, k),
                                _mm512_maskz_compress_epi8(m, v));
        *nt += k;
        *nv += k;
        *last = i + 64 - (int64_t)__builtin_clzll(m);
    }
    return i;
}
#endif

/* Split sym (groups contexts at bounds) into tokens, the other values and extra bits.
 * base[g] receives the group's base symbol, nonzero[g] its count of other symbols. extra must hold n / 32 + 16 zeroed bytes
 * (sum of bitlen(r) - 1 over runs r >= 16 is at most n / 4). Returns the token count and
 * writes the value count and the extra bit count. */
CKZ_API int64_t ckz_rle_split(const uint8_t *sym, const int64_t *bounds, int32_t groups,
                              uint8_t *tokens, uint8_t *values, int64_t *nonzero,
                              uint8_t *base, uint8_t *extra, int64_t *n_values,
                              int64_t *extra_bits) {
    int64_t nt = 0, nv = 0, pos = 0;
    for (int32_t g = 0; g < groups; g++) {
        int64_t lo = bounds[g], hi = bounds[g + 1], last = lo, before = nv;
        base[g] = 0;
        nonzero[g] = 0;
        if (hi <= lo) continue;
        int64_t hist[256];
        ckz_bin_counts(sym + lo, hi - lo, hist);
        uint8_t b0 = 0;
        for (int v = 1; v < 256; v++)
            if (hist[v] > hist[b0]) b0 = (uint8_t)v;
        base[g] = b0;
        int64_t start = lo;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (ckz_avx512_ok())
            start = rle_group_avx512(sym, lo, hi, b0, &last, tokens, &nt, values, &nv, extra,
                                     &pos);
#endif
        for (int64_t i = start;; i++) {
            i = skip_base(sym, i, hi, b0);
            if (i >= hi) break;
            tokens[nt++] = run_token((uint64_t)(i - last), extra, &pos);
            values[nv++] = sym[i];
            last = i + 1;
        }
        tokens[nt++] = run_token((uint64_t)(hi - last), extra, &pos);
        nonzero[g] = nv - before;
    }
    *n_values = nv;
    *extra_bits = pos;
    return nt;
}

/* The inverse: fills out[0:bounds[groups]] from the tokens (nonzero[g] + 1 per non-empty
 * group), the values, the bases and the extra bits. Returns 0, or 1 when the parts are
 * inconsistent (a token out of range, runs that do not fill a group exactly, bits or values
 * left over or missing, a value equal to its group's base). */
CKZ_API int32_t ckz_rle_join(const uint8_t *tokens, int64_t n_tokens, const uint8_t *values,
                             int64_t n_values, const uint8_t *extra, int64_t extra_bits,
                             const int64_t *bounds, int32_t groups, const int64_t *nonzero,
                             const uint8_t *base, uint8_t *out) {
    int64_t t = 0, v = 0, pos = 0;
    /* A short run is written as 16 copies of its symbol, the bytes past it written again
     * by what follows (the groups fill out in order, every byte of [0, end) once at least) */
    const int64_t end = groups > 0 ? bounds[groups] : 0;
    uint8_t pattern[16];
    for (int32_t g = 0; g < groups; g++) {
        int64_t lo = bounds[g], hi = bounds[g + 1], at = lo;
        if (hi <= lo) {
            if (nonzero[g]) return 1;
            continue;
        }
        memset(pattern, base[g], sizeof pattern);
        if (nonzero[g] < 0 || nonzero[g] > hi - lo) return 1;
        for (int64_t j = 0; j <= nonzero[g]; j++) {
            if (t >= n_tokens) return 1;
            uint8_t k = tokens[t++];
            uint64_t r = k;
            if (k >= RLE_DIRECT) {
                int b = k - RLE_DIRECT + RLE_DIRECT_BITS; /* bitlen(r), 5..63 */
                if (b > 62 || pos + (b - 1) > extra_bits) return 1;
                r = 0;
                for (int q = 0; q < b - 1; q++, pos++)
                    r |= (uint64_t)((extra[pos >> 3] >> (pos & 7)) & 1) << q;
                r |= (uint64_t)1 << (b - 1);
            }
            if (r > (uint64_t)(hi - at)) return 1;
            if (r <= 16 && at + 16 <= end) /* most runs: one store, over what comes next */
                memcpy(out + at, pattern, 16);
            else
                memset(out + at, base[g], (size_t)r);
            at += (int64_t)r;
            if (j < nonzero[g]) {
                if (at >= hi || v >= n_values || values[v] == base[g]) return 1;
                out[at++] = values[v++];
            }
        }
        if (at != hi) return 1;
    }
    return (t == n_tokens && v == n_values && pos == extra_bits) ? 0 : 1;
}

CKZ_API int32_t ckz_avx2_ok(void); /* _native.c */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* The counts of indices below 32 64 at a time: one compare and a popcount per level, 16
 * levels where the block's indices are all below 16 (a 16-level codebook, the default), 32
 * where they are below 32 (a weight's 32 levels); a block holding an index >= 32 is counted
 * by the scalar loop into `c`. Returns where it stopped (a multiple of 64). 0.15 ns an index
 * against the four tables' 0.34 on the parents of the --quick throughput chain's deltas. */
__attribute__((target("avx512f,avx512bw,bmi2,popcnt"))) static int64_t
bin_counts_avx512(const uint8_t *prev, int64_t n, int64_t *c) {
    int64_t low[32] = {0};
    const __m512i from16 = _mm512_set1_epi8((char)0xF0), from32 = _mm512_set1_epi8((char)0xE0);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i p = _mm512_loadu_si512((const void *)(prev + i));
        if (!_mm512_test_epi8_mask(p, from16)) { /* constant bounds: unrolled, in registers */
            for (int b = 0; b < 16; b++)
                low[b] += (int64_t)_mm_popcnt_u64(
                    _mm512_cmpeq_epi8_mask(p, _mm512_set1_epi8((char)b)));
        } else if (!_mm512_test_epi8_mask(p, from32)) {
            for (int b = 0; b < 32; b++)
                low[b] += (int64_t)_mm_popcnt_u64(
                    _mm512_cmpeq_epi8_mask(p, _mm512_set1_epi8((char)b)));
        } else {
            for (int j = 0; j < 64; j++) c[prev[i + j]]++;
        }
    }
    for (int b = 0; b < 32; b++) c[b] += low[b];
    return i;
}
#endif

/* groups[b] = #{i : prev[i] == b} for b < 256 (the rearranged stream's group sizes). */
CKZ_API void ckz_bin_counts(const uint8_t *prev, int64_t n, int64_t *groups) {
    int64_t c[4][256];
    memset(c, 0, sizeof c);
    int64_t i = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (ckz_avx512_ok()) i = bin_counts_avx512(prev, n, c[0]);
#endif
    for (; i + 4 <= n; i += 4) { /* four tables: no store-to-load stall on equal bytes */
        c[0][prev[i]]++;
        c[1][prev[i + 1]]++;
        c[2][prev[i + 2]]++;
        c[3][prev[i + 3]]++;
    }
    for (; i < n; i++) c[0][prev[i]]++;
    for (int b = 0; b < 256; b++) groups[b] = c[0][b] + c[1][b] + c[2][b] + c[3][b];
}

/* -- requantizing against the parent's codebook, in one pass -------------------------------
 *
 * ckptzip.quantize.requantize for a linear-domain float32 tensor: every entry takes the
 * nearest of the new levels (#{mids < v}, as ckz_nearest), except the entries the first
 * quantization set to exactly zero (own_zero[its index], protected entries aside), which
 * take zero_at; the squared error of the result is summed as ckz_squared_error sums it
 * (float32 differences, double sums; the AVX-512 loop below adds in lanes, so the sums are
 * the same to rounding, and the quantizer records the relative error to 8 digits). With
 * `o2i` (may be NULL; 256 entries) the count is an ordinal among the non-zero levels of a
 * log-domain codebook and the index is o2i[count] (the cut-offs are then the value-space
 * geometric midpoints of those levels). Returns 1, having written nothing meaningful, when
 * a zero entry needs a zero level and zero_at < 0; else 0. */
/* out[i] = #{j : mids[j] < v[i]} for a block of at most 4096 values, a level at a time over
 * the block, so the compare and the add vectorise (AVX2 where the processor has it: the
 * same exact comparisons, so the same counts). Always inlined: the AVX2 wrapper's copy is
 * then compiled for AVX2 (with its 16 KiB of stack it was not inlined, and the wrapper
 * called the generic copy: SSE, four values a compare). */
static inline __attribute__((always_inline)) void
count_below_any(const float *v, int64_t k, const float *mids, int32_t n_mids, uint8_t *out) {
    int32_t cnt[4096];
    for (int64_t i = 0; i < k; i++) cnt[i] = 0;
    for (int32_t j = 0; j < n_mids; j++) {
        float t = mids[j];
        for (int64_t i = 0; i < k; i++) cnt[i] += t < v[i];
    }
    for (int64_t i = 0; i < k; i++) out[i] = (uint8_t)cnt[i];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) static void count_below_avx2(const float *v, int64_t k,
                                                             const float *mids, int32_t n_mids,
                                                             uint8_t *out) {
    count_below_any(v, k, mids, n_mids, out);
}
#endif

static void count_below(const float *v, int64_t k, const float *mids, int32_t n_mids,
                        uint8_t *out) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (ckz_avx2_ok()) { /* CKPTZIP_NO_AVX2=1: the generic copy, the same counts */
        count_below_avx2(v, k, mids, n_mids, out);
        return;
    }
#endif
    count_below_any(v, k, mids, n_mids, out);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RQ_ZEROS 4 /* the parent's exact-zero indices the vector loop compares against */
/* ckz_requantize sixteen values at a time with AVX-512 where the new codebook has at most 32
 * levels (ascending mids, every index below 32) and the parent's exact zeros are at most
 * RQ_ZEROS indices (zeros[], n_zeros): #{mids < v} by a branch-free binary search over the
 * mids in two registers, o2i and the levels by register permutes, the parent's zeros by
 * compares, protected lanes from the sorted positions. The sums go in lanes, another order
 * than the scalar loop's (equal to rounding: the quantizer records the relative error to 8
 * digits). Returns -1 where ckz_requantize returns 1, else where it stopped (a multiple of
 * 16: the scalar loop takes the rest), with the sums so far in sums[0..1] and the next
 * protected position's index in *next. */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static int64_t
requantize_avx512(const float *v, int64_t n, const uint8_t *qidx, const uint8_t *zeros,
                  int32_t n_zeros, const int64_t *prot, int64_t n_prot, const float *mids,
                  int32_t n_mids, const uint8_t *o2i, int32_t zero_at, const float *levels,
                  int32_t top_index, uint8_t *out, double *sums, int64_t *next_out) {
    float cut[32], lev[32];
    int32_t o2[32] = {0};
    for (int j = 0; j < 32; j++) {
        cut[j] = j < n_mids ? mids[j] : INFINITY;
        lev[j] = j <= top_index ? levels[j] : 0.0f;
    }
    for (int32_t j = 0; j <= n_mids; j++) o2[j] = o2i ? o2i[j] : j;
    const __m512 c0 = _mm512_loadu_ps(cut), c1 = _mm512_loadu_ps(cut + 16);
    const __m512 l0 = _mm512_loadu_ps(lev), l1 = _mm512_loadu_ps(lev + 16);
    const __m512i o0 = _mm512_loadu_si512((const void *)o2);
    const __m512i o1 = _mm512_loadu_si512((const void *)(o2 + 16));
    const __m512i vzero_at = _mm512_set1_epi32(zero_at < 0 ? 0 : zero_at);
    __m512i zk[RQ_ZEROS];
    for (int z = 0; z < RQ_ZEROS; z++) zk[z] = _mm512_set1_epi32(z < n_zeros ? zeros[z] : -1);
    int32_t top = ckz_search_top(n_mids);
    __m512d e0 = _mm512_setzero_pd(), e1 = e0, m0 = e0, m1 = e0;
    int64_t next = 0, stop = n_prot > 0 ? prot[0] : n, i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(v + i);
        __m512i cnt = ckz_count_below16(c0, c1, top, x); /* #{mids < x} */
        __m512i k = _mm512_permutex2var_epi32(o0, cnt, o1);
        __mmask16 protected_lanes = 0;
        for (; stop < i + 16; stop = ++next < n_prot ? prot[next] : n)
            protected_lanes |= (__mmask16)(1u << (stop - i));
        __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qidx + i)));
        __mmask16 z = 0;
        for (int t = 0; t < n_zeros; t++) z |= _mm512_cmpeq_epi32_mask(q, zk[t]);
        z &= (__mmask16)~protected_lanes;
        if (z && zero_at < 0) return -1;
        k = _mm512_mask_mov_epi32(k, z, vzero_at);
        _mm_storeu_si128((__m128i *)(out + i), _mm512_cvtepi32_epi8(k));
        __m512 d = _mm512_maskz_sub_ps((__mmask16)~protected_lanes,
                                       _mm512_permutex2var_ps(l0, k, l1), x);
        __m512d dl = _mm512_cvtps_pd(_mm512_castps512_ps256(d));
        __m512d dh = _mm512_cvtps_pd(_mm512_extractf32x8_ps(d, 1));
        __m512d xl = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
        __m512d xh = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
        e0 = _mm512_add_pd(e0, _mm512_mul_pd(dl, dl));
        e1 = _mm512_add_pd(e1, _mm512_mul_pd(dh, dh));
        m0 = _mm512_add_pd(m0, _mm512_mul_pd(xl, xl));
        m1 = _mm512_add_pd(m1, _mm512_mul_pd(xh, xh));
    }
    sums[0] = _mm512_reduce_add_pd(_mm512_add_pd(e0, e1));
    sums[1] = _mm512_reduce_add_pd(_mm512_add_pd(m0, m1));
    *next_out = next;
    return i;
}
#endif

CKZ_API int32_t ckz_requantize(const float *v, int64_t n, const uint8_t *qidx,
                               const uint8_t *own_zero, const int64_t *prot, int64_t n_prot,
                               const float *mids, int32_t n_mids, const uint8_t *o2i,
                               int32_t zero_at, const float *levels, uint8_t *out,
                               double *sums) {
    int64_t start = 0, next = 0;
    double part[2] = {0.0, 0.0};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (n_mids <= 31 && ckz_avx512_ok()) {
        uint8_t zeros[RQ_ZEROS];
        int32_t n_zeros = 0, top_index = n_mids, sorted = 1;
        for (int b = 0; b < 256; b++)
            if (own_zero[b]) {
                if (n_zeros >= RQ_ZEROS) { /* too many: the loop below */
                    n_zeros = RQ_ZEROS + 1;
                    break;
                }
                zeros[n_zeros++] = (uint8_t)b;
            }
        for (int32_t j = 0; o2i && j <= n_mids; j++)
            top_index = o2i[j] > top_index ? o2i[j] : top_index;
        if (zero_at > top_index) top_index = zero_at;
        for (int32_t j = 1; j < n_mids; j++) sorted &= mids[j - 1] < mids[j];
        if (n_zeros <= RQ_ZEROS && top_index < 32 && sorted) {
            start = requantize_avx512(v, n, qidx, zeros, n_zeros, prot, n_prot, mids, n_mids,
                                      o2i, zero_at, levels, top_index, out, part, &next);
            if (start < 0) return 1;
        }
    }
#endif
    double err = part[0], norm = part[1];
    int64_t stop = next < n_prot ? prot[next] : n;
    for (int64_t lo = start; lo < n; lo += 4096) { /* the vector loop's tail, or all */
        int64_t hi = lo + 4096 < n ? lo + 4096 : n;
        /* the indices of the block first, a level at a time over the block (the compare
         * and add vectorise); many levels by _native.c's nearest (binary search) */
        if (n_mids <= 32)
            count_below(v + lo, hi - lo, mids, n_mids, out + lo);
        else
            ckz_nearest(v + lo, hi - lo, mids, n_mids, out + lo);
        if (o2i)
            for (int64_t i = lo; i < hi; i++) out[i] = o2i[out[i]];
        double e = 0.0, m = 0.0;
        for (int64_t i = lo; i < hi; i++) {
            float x = v[i];
            m += (double)x * (double)x;
            if (i == stop) {
                next++;
                stop = next < n_prot ? prot[next] : n;
                continue;
            }
            if (own_zero[qidx[i]]) {
                if (zero_at < 0) return 1;
                out[i] = (uint8_t)zero_at;
            }
            float d = levels[out[i]] - x;
            e += (double)d * (double)d;
        }
        err += e;
        norm += m;
    }
    sums[0] = err;
    sums[1] = norm;
    return 0;
}

/* -- the "rle" back end's zero runs --------------------------------------------------------
 *
 * The run-length form of ckptzip/entropy.py's "rle" back ends: for each nonzero symbol the
 * length r of the zero run before it (r // 255 bytes 255 then r % 255), then the nonzero
 * symbols. One pass each way where the reference takes six over the stream. */

/* The form of sym's n symbols: the run bytes into runs, the nonzero symbols into values.
 * Returns the count of nonzero symbols; *n_runs the run bytes (at most nonzero + n / 255).
 * Zeros are skipped eight bytes at a time. */
CKZ_API int64_t ckz_zero_runs_encode(const uint8_t *sym, int64_t n, uint8_t *runs,
                                     uint8_t *values, int64_t *n_runs) {
    int64_t nr = 0, nv = 0, last = -1;
    for (int64_t i = 0;; i++) {
        i = skip_base(sym, i, n, 0);
        if (i >= n) break;
        int64_t g = i - last - 1;
        for (; g >= 255; g -= 255) runs[nr++] = 255;
        runs[nr++] = (uint8_t)g;
        values[nv++] = sym[i];
        last = i;
    }
    *n_runs = nr;
    return nv;
}

/* Its inverse: data holds the run bytes, then the `nonzero` nonzero symbols; out gets the n
 * symbols. Returns 0; 1 when the runs and the symbols disagree (not `nonzero` runs, escapes
 * after the last run, a zero symbol); 2 when a symbol lands at or past n, the last such
 * position in *last (the checks of _reference.zero_runs_decode, in its order).
 * 0 <= nonzero <= min(size, n). */
CKZ_API int32_t ckz_zero_runs_decode(const uint8_t *data, int64_t size, int64_t nonzero,
                                     int64_t n, uint8_t *out, int64_t *last) {
    const uint8_t *values = data + (size - nonzero);
    int64_t runs = size - nonzero, ends = 0, pos = -1, gap = 0;
    memset(out, 0, (size_t)n);
    for (int64_t i = 0; i < runs; i++) {
        uint8_t b = data[i];
        if (b == 255) {
            gap += 255;
            continue;
        }
        pos += gap + b + 1;
        gap = 0;
        if (ends < nonzero && pos < n) out[pos] = values[ends];
        ends++;
    }
    if (ends != nonzero || (ends > 0 && gap != 0) || memchr(values, 0, (size_t)nonzero) != NULL)
        return 1;
    if (ends > 0 && pos >= n) {
        *last = pos;
        return 2;
    }
    return 0;
}
