/* ckptzip's compiled kernels: the per-element passes of quantize, packing, bindiff and the
 * ANS back end, each the exact twin of a reference in ckptzip/kernels/_reference.py.
 *
 * Plain C99 over caller-owned buffers, no Python objects: the functions are called through
 * ctypes, which releases the GIL for the duration of each call, so encoding threads run them
 * in parallel. Floating-point results must be bit-identical to the reference: build with
 * contraction off (-ffp-contract=off), and every float expression is written in the
 * reference's order and precision.
 *
 * The module init exists only so the package's build (setuptools, an Extension) can build
 * and import this file like any other extension; nothing is exported to Python through it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#if defined(_WIN32)
#define CKZ_API __declspec(dllexport)
#else
#define CKZ_API __attribute__((visibility("default")))
#endif

#define CKZ_ABI_VERSION 12 /* also covers _entropy.c's, _delta.c's and _wide.c's symbols */

CKZ_API int ckz_abi_version(void) { return CKZ_ABI_VERSION; }

/* -- sketch: bucket codes and their histogram, one pass ---------------------------------
 *
 * m(x) = #{j < cap : T[j] < |x|} for ascending float32 thresholds T, raised to 1 for any
 * non-zero x; code = cap + sign(x) * m. A table indexed by the top 15 bits of |x| (exponent
 * and 7 mantissa bits) gives a lower bound of m; the loop then steps over the (at most one,
 * for the default accuracy) thresholds left in that slice of the float line.
 */
#define PREFIX_SHIFT 16
#define PREFIXES (1 << (31 - PREFIX_SHIFT))

static inline float bits_to_float(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* Whether the AVX2 passes may run (decided once, for every pass of the library, _wide.c's
 * included): the processor has AVX2 and CKPTZIP_NO_AVX2 is unset, which makes a process take
 * the scalar loops other processors run (the same bits either way). */
CKZ_API int32_t ckz_avx2_ok(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static int ok = -1; /* the race of two first calls writes the same value */
    if (ok < 0) ok = __builtin_cpu_supports("avx2") && getenv("CKPTZIP_NO_AVX2") == NULL;
    return ok;
#else
    return 0;
#endif
}

CKZ_API int32_t ckz_avx512_ok(void); /* below: the AVX-512 switch (BW, DQ, VBMI2) */

/* The offsets' lookup: lut[prefix of |x|] = #{T < the smallest float with that prefix}, pad
 * = T then +inf; one_step when at most one threshold lies in any slice (one branch-free step
 * finishes every offset). lut is NULL where it cannot be made (then a plain search). */
typedef struct {
    const float *t;
    int32_t cap;
    uint16_t *lut;
    float *pad;
    int one_step;
} ckz_offsets;

static void ckz_offsets_open(ckz_offsets *o, const float *t, int32_t cap) {
    o->t = t;
    o->cap = cap;
    /* + 1: the vector pass's 32-bit gathers read one entry past */
    o->lut = cap < 65536 ? (uint16_t *)calloc(PREFIXES + 1, sizeof(uint16_t)) : NULL;
    o->pad = (float *)malloc(sizeof(float) * ((size_t)cap + 1));
    o->one_step = 1;
    if (o->lut == NULL || o->pad == NULL) {
        free(o->lut);
        free(o->pad);
        o->lut = NULL;
        o->pad = NULL;
        return;
    }
    memcpy(o->pad, t, sizeof(float) * (size_t)cap);
    o->pad[cap] = bits_to_float(0x7f800000u);
    int32_t j = 0, last = 0;
    for (uint32_t p = 0; p < PREFIXES; p++) {
        float lowest = bits_to_float(p << PREFIX_SHIFT);
        while (j < cap && t[j] < lowest) j++;
        o->lut[p] = (uint16_t)j;
        if (j - last > 1) o->one_step = 0;
        last = j;
    }
    /* the top slice holds what lies above its lowest value */
    if (cap - last > 1) o->one_step = 0;
}

static void ckz_offsets_close(ckz_offsets *o) {
    free(o->pad);
    free(o->lut);
}

/* The bucket code of the value with bits b. */
static inline int32_t ckz_code(const ckz_offsets *o, uint32_t b) {
    uint32_t mag = b & 0x7fffffffu;
    float ax = bits_to_float(mag);
    int32_t m;
    if (o->lut != NULL) {
        m = (int32_t)o->lut[mag >> PREFIX_SHIFT];
        m += o->pad[m] < ax;
        if (!o->one_step)
            while (o->pad[m] < ax) m++;
    } else {
        m = 0;
        while (m < o->cap && o->t[m] < ax) m++;
    }
    m += (m == 0) & (mag != 0);
    return (b >> 31) ? o->cap - m : o->cap + m;
}

CKZ_API void ckz_sketch_codes(const float *x, int64_t n, const float *t, int32_t cap,
                              int32_t *codes, int64_t *counts) {
    ckz_offsets o;
    ckz_offsets_open(&o, t, cap);
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        int32_t c = ckz_code(&o, b);
        codes[i] = c;
        counts[c]++;
    }
    ckz_offsets_close(&o);
}

/* -- offsets by arithmetic: #{T < |x|} from log2 |x|, without a table load ----------------
 *
 * The thresholds are gamma^k rounded to float32, so a threshold's index is an affine function
 * of its log, up to the rounding: i = A log2 T[i] + B + eta_i, |eta_i| about 3e-6 for the
 * sketch's gamma. ckz_log_fit fits A and B through the first and last normal, finite
 * thresholds g0 < g1 and measures the largest |eta| over [g0, g1]; delta = that + 1e-7 + A 1e-9
 * (what the vector log2 below can be off by, with room to spare: ckz_logkey). For
 * T[g0] < |x| < T[g1], with y = A log2|x| + B: every i <= floor(y) has T[i] < |x| and every
 * i > floor(y) has T[i] >= |x| wherever y lies more than delta from an integer, so the offset
 * is floor(y) + 1. A value within delta of an integer (about 2 delta of them), or outside
 * (T[g0], T[g1]) (zeros, subnormals, the collapsed keys, non-finite values) takes the table's
 * scalar lookup: the same offsets, bit for bit, as the gather and scalar loops.
 *
 * fit: A, B, delta, T[g0], T[g1]. Returns 0 (fit unusable: the caller keeps its other loop)
 * where fewer than three thresholds are normal, they do not ascend strictly, there are 2^24
 * or more, or delta would exceed 1e-3. */
CKZ_API int32_t ckz_log_fit(const float *t, int64_t n, double *fit) {
    int64_t g0 = 0, g1 = n - 1;
    while (g0 < n && !(t[g0] >= 0x1p-126f)) g0++;
    while (g1 >= 0 && !(t[g1] <= 3.4028234663852886e38f)) g1--;
    if (n >= (int64_t)1 << 24 || g0 >= n || g1 < 0 || g1 - g0 < 2) return 0;
    for (int64_t i = g0; i < g1; i++)
        if (!(t[i] < t[i + 1])) return 0;
    double l0 = log2((double)t[g0]), l1 = log2((double)t[g1]);
    double a = (double)(g1 - g0) / (l1 - l0), b = (double)g0 - a * l0, eta = 0.0;
    for (int64_t i = g0; i <= g1; i++) {
        double d = fabs(a * log2((double)t[i]) + b - (double)i);
        eta = d > eta ? d : eta;
    }
    /* the vector log2's error (under 2.3e-10 before scaling by a: ckz_logkey) and the doubles'
     * rounding at |y| < 2^24 (under 2e-8), with room */
    double delta = eta + 1e-7 + a * 1e-9;
    if (!(delta <= 1e-3)) return 0;
    fit[0] = a;
    fit[1] = b;
    fit[2] = delta;
    fit[3] = (double)t[g0];
    fit[4] = (double)t[g1];
    return 1;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* The vector constants of one fit: log2 |x| = e + log2 c_j + log(1 + r) / ln 2 with c_j the
 * centre of the sixteenth of [1, 2) the mantissa m lies in (its top four bits j), r = m / c_j
 * - 1 (|r| <= 1/32), log(1 + r) by its series to r^5 (the rest under 1.6e-10, 2.3e-10 in
 * log2 units: ckz_log_fit's delta allows A 1e-9 for it). Held per j: 1 / c_j and
 * A log2 c_j + B + 1. */
typedef struct {
    __m512d inv_c_lo, inv_c_hi, log_c_lo, log_c_hi, a, a_ln2, delta, one_minus_delta;
    __m512 lo, hi;
} ckz_logkey;

__attribute__((target("avx512f,avx512dq"))) static void ckz_logkey_open(ckz_logkey *k,
                                                                       const double *fit) {
    double inv_c[16], log_c[16];
    for (int j = 0; j < 16; j++) {
        double c = 1.0 + (2.0 * j + 1.0) / 32.0;
        inv_c[j] = 1.0 / c;
        log_c[j] = fit[0] * log2(c) + fit[1] + 1.0; /* + 1: the offset floor(y) + 1 */
    }
    k->inv_c_lo = _mm512_loadu_pd(inv_c);
    k->inv_c_hi = _mm512_loadu_pd(inv_c + 8);
    k->log_c_lo = _mm512_loadu_pd(log_c);
    k->log_c_hi = _mm512_loadu_pd(log_c + 8);
    k->a = _mm512_set1_pd(fit[0]);
    k->a_ln2 = _mm512_set1_pd(fit[0] / 0.6931471805599453);
    k->delta = _mm512_set1_pd(fit[2]);
    k->one_minus_delta = _mm512_set1_pd(1.0 - fit[2]);
    k->lo = _mm512_set1_ps((float)fit[3]);
    k->hi = _mm512_set1_ps((float)fit[4]);
}

/* floor(y) + 1 of eight magnitudes (their float32 bits in mag, normal and finite where it
 * matters), and in *near the lanes whose y lies within delta of an integer. y + 1 is computed
 * (the + 1 folded into the table) and is > 0 there, so truncation is the floor. */
__attribute__((target("avx512f,avx512dq"))) static inline __m256i
ckz_logkey8(const ckz_logkey *k, __m256i mag, __mmask8 *near) {
    const __m512d one = _mm512_set1_pd(1.0);
    __m512d x = _mm512_cvtps_pd(_mm256_castsi256_ps(mag));
    __m512i j = _mm512_cvtepu32_epi64(_mm256_srli_epi32(mag, 19)); /* low 4 bits used */
    __m512d m = _mm512_getmant_pd(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero);
    __m512d e = _mm512_getexp_pd(x);
    __m512d r = _mm512_fmsub_pd(m, _mm512_permutex2var_pd(k->inv_c_lo, j, k->inv_c_hi), one);
    __m512d p = _mm512_fmadd_pd(r, _mm512_set1_pd(1.0 / 5.0), _mm512_set1_pd(-1.0 / 4.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(1.0 / 3.0));
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(-1.0 / 2.0));
    p = _mm512_fmadd_pd(p, r, one);
    p = _mm512_mul_pd(p, r); /* log(1 + r) */
    /* y + 1 = A e + (A log2 c_j + B + 1) + (A / ln 2) log(1 + r) */
    __m512d y1 = _mm512_fmadd_pd(
        p, k->a_ln2,
        _mm512_fmadd_pd(e, k->a, _mm512_permutex2var_pd(k->log_c_lo, j, k->log_c_hi)));
    __m512d fr = _mm512_reduce_pd(y1, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); /* y - floor y */
    *near = _mm512_cmp_pd_mask(fr, k->delta, _CMP_LT_OQ) |
            _mm512_cmp_pd_mask(fr, k->one_minus_delta, _CMP_GT_OQ);
    return _mm512_cvttpd_epi32(y1);
}

/* Sixteen magnitudes' floor(y) + 1, and the lanes it does not settle (outside (T[g0],
 * T[g1]), NaN included, or near an integer): the caller looks those up. */
__attribute__((target("avx512f,avx512dq"))) static inline __m512i
ckz_logkey16(const ckz_logkey *k, __m512 a, __mmask16 *fix) {
    __m512i mag = _mm512_castps_si512(a);
    __mmask8 n0, n1;
    __m256i k0 = ckz_logkey8(k, _mm512_castsi512_si256(mag), &n0);
    __m256i k1 = ckz_logkey8(k, _mm512_extracti64x4_epi64(mag, 1), &n1);
    __mmask16 in = _mm512_cmp_ps_mask(a, k->lo, _CMP_GT_OQ) &
                   _mm512_cmp_ps_mask(a, k->hi, _CMP_LT_OQ);
    *fix = (__mmask16)(~in | (((unsigned)n1 << 8 | n0) & in));
    return _mm512_inserti64x4(_mm512_castsi256_si512(k0), k1, 1);
}
#endif

/* -- the level fit's weights: Adam's step, summed per bucket ------------------------------
 *
 * sums[code of x[i]] += w(v[i]) over the entries neither protected (|x| > pt, or |x| == pt
 * at i <= pp) nor pruned (|x| < qt, or |x| == qt at i <= qp), in position order (the order of
 * torch.bincount, so the same sums), with w(v) the reference's torch ops: in double,
 * max(v, 0) (NaN stays NaN), sqrt, + eps, squared, reciprocal, rounded to float, and a NaN or
 * infinite weight counted as 0 (skipped: adding 0.0 to a sum of non-negative terms changes
 * no bit). */
typedef struct {
    const ckz_offsets *o;
    const float *x, *v;
    double eps;
    float pt, qt;
    int64_t pp, qp;
    double *sums;
} ckz_fit_ctx;

static inline void ckz_fit_one(const ckz_fit_ctx *c, int64_t i) {
    uint32_t b;
    memcpy(&b, &c->x[i], sizeof b);
    float a = bits_to_float(b & 0x7fffffffu);
    if (a > c->pt || (a == c->pt && i <= c->pp) || a < c->qt || (a == c->qt && i <= c->qp))
        return;
    double d = (double)c->v[i];
    d = d < 0.0 ? 0.0 : d;
    d = sqrt(d) + c->eps;
    float w = (float)(1.0 / (d * d));
    if (!(w <= 3.4028234663852886e38f)) return; /* NaN or inf */
    c->sums[ckz_code(c->o, b)] += (double)w;
}

static void ckz_fit_scalar(const ckz_fit_ctx *c, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) ckz_fit_one(c, i);
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define CKZ_HAVE_AVX2_FIT 1
/* Eight values at a time: a group wholly pruned is skipped; otherwise the codes (the offset
 * table and the one threshold step, gathered) and the weights (four doubles a lane group:
 * max, sqrt, add, multiply, divide as separate correctly rounded instructions, then rounded
 * to float) in the lanes, and the sums added lane by lane in position order. A group holding
 * a value on a rule's edge (|x| >= pt, |x| == qt) goes to ckz_fit_one. Only for tables whose
 * slices hold at most one threshold (one_step). */
/* The group of eight values from i, for both vector loops: 0 when none is kept (every
 * one pruned) or it holds a value on a rule's edge (|x| >= pt, |x| == qt: then already
 * summed one by one, by ckz_fit_one), else the mask of the values kept (|x| >= qt); the
 * values and their magnitudes in *xv, *a. */
__attribute__((target("avx2"), always_inline)) static inline unsigned
ckz_fit_group(const ckz_fit_ctx *c, int64_t i, __m256 *xv, __m256 *a) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 vpt = _mm256_set1_ps(c->pt), vqt = _mm256_set1_ps(c->qt);
    *xv = _mm256_loadu_ps(c->x + i);
    *a = _mm256_and_ps(*xv, absmask);
    __m256 edge = _mm256_or_ps(_mm256_cmp_ps(*a, vpt, _CMP_GE_OQ),
                               _mm256_cmp_ps(*a, vqt, _CMP_EQ_OQ));
    if (_mm256_movemask_ps(edge)) {
        for (int64_t j = i; j < i + 8; j++) ckz_fit_one(c, j);
        return 0;
    }
    return ~(unsigned)_mm256_movemask_ps(_mm256_cmp_ps(*a, vqt, _CMP_LT_OQ)) & 0xff;
}

__attribute__((target("avx2"))) static void ckz_fit_avx2(const ckz_fit_ctx *c, int64_t lo,
                                                         int64_t hi) {
    const ckz_offsets *o = c->o;
    const __m256 fmax = _mm256_set1_ps(3.4028234663852886e38f);
    const __m256i low16 = _mm256_set1_epi32(0xffff), izero = _mm256_setzero_si256();
    const __m256i vcap = _mm256_set1_epi32(o->cap);
    const __m256d dzero = _mm256_setzero_pd(), done = _mm256_set1_pd(1.0);
    const __m256d veps = _mm256_set1_pd(c->eps);
    int32_t code[8];
    double w[8];
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 xv, a;
        unsigned keep = ckz_fit_group(c, i, &xv, &a);
        if (!keep) continue;
        /* the weights */
        __m256 vv = _mm256_loadu_ps(c->v + i);
        __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(vv));
        __m256d d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(vv, 1));
        d0 = _mm256_add_pd(_mm256_sqrt_pd(_mm256_max_pd(dzero, d0)), veps); /* NaN stays */
        d1 = _mm256_add_pd(_mm256_sqrt_pd(_mm256_max_pd(dzero, d1)), veps);
        __m128 w0 = _mm256_cvtpd_ps(_mm256_div_pd(done, _mm256_mul_pd(d0, d0)));
        __m128 w1 = _mm256_cvtpd_ps(_mm256_div_pd(done, _mm256_mul_pd(d1, d1)));
        __m256 wf = _mm256_set_m128(w1, w0);
        keep &= _mm256_movemask_ps(_mm256_cmp_ps(wf, fmax, _CMP_LE_OQ));
        if (!keep) continue;
        _mm256_storeu_pd(w, _mm256_cvtps_pd(w0));
        _mm256_storeu_pd(w + 4, _mm256_cvtps_pd(w1));
        /* the codes: ckz_code in the lanes */
        __m256i mag = _mm256_castps_si256(a);
        __m256i m = _mm256_and_si256(
            _mm256_i32gather_epi32((const int *)o->lut, _mm256_srli_epi32(mag, PREFIX_SHIFT), 2),
            low16);
        __m256 edge_t = _mm256_i32gather_ps(o->pad, m, 4);
        m = _mm256_sub_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(edge_t, a, _CMP_LT_OQ)));
        __m256i raise = _mm256_andnot_si256(_mm256_cmpeq_epi32(mag, izero),
                                            _mm256_cmpeq_epi32(m, izero));
        m = _mm256_sub_epi32(m, raise);
        __m256i sign = _mm256_srai_epi32(_mm256_castps_si256(xv), 31);
        m = _mm256_sub_epi32(_mm256_xor_si256(m, sign), sign); /* -m for a set sign bit */
        _mm256_storeu_si256((__m256i *)code, _mm256_add_epi32(vcap, m));
        for (int j = 0; j < 8; j++)
            if (keep >> j & 1) c->sums[code[j]] += w[j];
    }
    ckz_fit_scalar(c, i, hi);
}

/* ckz_fit_avx2's loop with AVX-512 and the codes by arithmetic (ckz_logkey16's eight-lane
 * half, the lanes it does not settle by ckz_code): no gather. Weights as in the AVX2 loop
 * (eight doubles: max, sqrt, add, multiply, divide, each correctly rounded, then rounded to
 * float), the sums added lane by lane in position order. Needs a log fit of the sketch's
 * thresholds (ckz_log_fit). */
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"))) static void
ckz_fit_avx512(const ckz_fit_ctx *c, const double *fit, int64_t lo, int64_t hi) {
    const ckz_offsets *o = c->o;
    ckz_logkey k;
    ckz_logkey_open(&k, fit);
    const __m256 fmax = _mm256_set1_ps(3.4028234663852886e38f);
    const __m256 vlo = _mm512_castps512_ps256(k.lo), vhi = _mm512_castps512_ps256(k.hi);
    const __m256i vcap = _mm256_set1_epi32(o->cap);
    const __m512d dzero = _mm512_setzero_pd(), done = _mm512_set1_pd(1.0);
    const __m512d veps = _mm512_set1_pd(c->eps);
    int32_t code[8];
    double w[8];
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 xv, a;
        unsigned keep = ckz_fit_group(c, i, &xv, &a);
        if (!keep) continue;
        /* the weights */
        __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(c->v + i));
        d = _mm512_add_pd(_mm512_sqrt_pd(_mm512_max_pd(dzero, d)), veps); /* NaN stays */
        __m256 wf = _mm512_cvtpd_ps(_mm512_div_pd(done, _mm512_mul_pd(d, d)));
        keep &= (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(wf, fmax, _CMP_LE_OQ));
        if (!keep) continue;
        _mm512_storeu_pd(w, _mm512_cvtps_pd(wf));
        /* the codes: cap +- m, m = floor(y) + 1 inside (T[g0], T[g1]) */
        __mmask8 near;
        __m256i m = ckz_logkey8(&k, _mm256_castps_si256(a), &near);
        unsigned in = (unsigned)_mm256_movemask_ps(_mm256_and_ps(
            _mm256_cmp_ps(a, vlo, _CMP_GT_OQ), _mm256_cmp_ps(a, vhi, _CMP_LT_OQ)));
        unsigned fix = (~in | (near & in)) & keep;
        __m256i sign = _mm256_srai_epi32(_mm256_castps_si256(xv), 31);
        m = _mm256_sub_epi32(_mm256_xor_si256(m, sign), sign); /* -m for a set sign bit */
        _mm256_storeu_si256((__m256i *)code, _mm256_add_epi32(vcap, m));
        for (; fix; fix &= fix - 1) {
            int j = __builtin_ctz(fix);
            uint32_t b;
            memcpy(&b, &c->x[i + j], sizeof b);
            code[j] = ckz_code(o, b);
        }
        for (int j = 0; j < 8; j++)
            if (keep >> j & 1) c->sums[code[j]] += w[j];
    }
    ckz_fit_scalar(c, i, hi);
}
#endif

CKZ_API void ckz_fit_sums(const float *x, const float *v, int64_t n, double eps, const float *t,
                          int32_t cap, float pt, int64_t pp, float qt, int64_t qp,
                          double *sums) {
    ckz_offsets o;
    ckz_offsets_open(&o, t, cap);
    ckz_fit_ctx c = {&o, x, v, eps, pt, qt, pp, qp, sums};
    void (*pass)(const ckz_fit_ctx *, int64_t, int64_t) = ckz_fit_scalar;
#ifdef CKZ_HAVE_AVX2_FIT
    double fit[5];
    if (ckz_avx512_ok() && ckz_log_fit(t, cap, fit)) {
        ckz_fit_avx512(&c, fit, 0, n);
        ckz_offsets_close(&o);
        return;
    }
    if (o.lut != NULL && o.one_step && ckz_avx2_ok()) pass = ckz_fit_avx2;
#endif
    pass(&c, 0, n);
    ckz_offsets_close(&o);
}

/* -- the protect/prune selection: |code - cap|, and the positions of ranks in [lo, hi] ---*/
CKZ_API void ckz_magnitude_rank(const int32_t *codes, int64_t n, int32_t cap, int32_t *out) {
    for (int64_t i = 0; i < n; i++) {
        int32_t d = codes[i] - cap;
        out[i] = d < 0 ? -d : d;
    }
}

/* Writes the sorted positions into out (room for n) and returns how many. */
CKZ_API int64_t ckz_positions(const int32_t *x, int64_t n, int32_t lo, int32_t hi,
                              int64_t *out) {
    int64_t k = 0;
    uint32_t span = (uint32_t)hi - (uint32_t)lo;
    for (int64_t i = 0; i < n; i++) {
        out[k] = i;
        k += ((uint32_t)x[i] - (uint32_t)lo) <= span; /* lo <= x <= hi, branch-free */
    }
    return k;
}

/* -- nearest-level assignment through the bucket codes -----------------------------------
 *
 * lut[code] is the level index of every bucket that holds no cut-off, or `sentinel` for a
 * bucket that does; those entries are resolved one by one: ordinal = #{cut-offs < v}, index
 * = o2i[ordinal], and (log domain) an exact zero goes to `zero_fix` when it is >= 0.
 */
CKZ_API void ckz_assign_codes(const int32_t *codes, const float *v, int64_t n,
                              const int16_t *lut, int32_t sentinel, const float *cuts,
                              int32_t n_cuts, const uint8_t *o2i, int32_t zero_fix,
                              uint8_t *out) {
    for (int64_t i = 0; i < n; i++) {
        int32_t k = lut[codes[i]];
        if (k == sentinel) {
            float value = v[i];
            int32_t lo = 0, hi = n_cuts;
            while (lo < hi) {
                int32_t mid = (lo + hi) >> 1;
                if (cuts[mid] < value)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            k = o2i[lo];
            if (zero_fix >= 0 && value == 0.0f) k = zero_fix;
        }
        out[i] = (uint8_t)k;
    }
}

/* -- nearest of sorted levels: #{mids < v} (a value on a midpoint goes to the lower level) --*/
CKZ_API void ckz_nearest(const float *v, int64_t n, const float *mids, int32_t n_mids,
                         uint8_t *out) {
    if (n_mids <= 32) { /* few levels: count branch-free, which the compiler vectorises */
        for (int64_t i = 0; i < n; i++) {
            float value = v[i];
            int32_t k = 0;
            for (int32_t j = 0; j < n_mids; j++) k += mids[j] < value;
            out[i] = (uint8_t)k;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float value = v[i];
        int32_t lo = 0, hi = n_mids;
        while (lo < hi) {
            int32_t mid = (lo + hi) >> 1;
            if (mids[mid] < value)
                lo = mid + 1;
            else
                hi = mid;
        }
        out[i] = (uint8_t)lo;
    }
}

/* -- the measured error: sum over non-protected entries of (level - v)^2 and of v^2 ------
 *
 * The difference is taken in float32 (as the reference does), its square summed in double.
 * `protected` holds sorted positions; they contribute nothing to the error.
 */
CKZ_API void ckz_squared_error(const float *v, const uint8_t *idx, int64_t n,
                               const float *levels, const int64_t *prot, int64_t n_prot,
                               double *out) {
    /* summed by blocks of 4096, then the blocks: rounding stays near the pairwise sum's */
    double err = 0.0, norm = 0.0;
    int64_t next = 0;
    int64_t stop = n_prot > 0 ? prot[0] : n;
    for (int64_t lo = 0; lo < n; lo += 4096) {
        int64_t hi = lo + 4096 < n ? lo + 4096 : n;
        double e = 0.0, m = 0.0;
        for (int64_t i = lo; i < hi; i++) {
            float x = v[i];
            m += (double)x * (double)x;
            if (i == stop) {
                next++;
                stop = next < n_prot ? prot[next] : n;
                continue;
            }
            float d = levels[idx[i]] - x;
            e += (double)d * (double)d;
        }
        err += e;
        norm += m;
    }
    out[0] = err;
    out[1] = norm;
}

/* -- stochastic rounding -------------------------------------------------------------------
 *
 * A 32-bit hash of an element's position under a seed (lowbias32's finaliser, twice: the low
 * and the high 32 bits of the position), the uniform draw of that element: the reference
 * computes the same integers with torch ops. */
static inline uint32_t ckz_mix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x7feb352dU;
    h ^= h >> 15;
    h *= 0x846ca68bU;
    h ^= h >> 16;
    return h;
}

/* Every entry's index moved from the nearest of the sorted `levels` (what idx holds) to the
 * lower `a` or the upper `b` of the two levels around its value x, the upper when
 * u * (b - a) < x - a (in float32), u = (h(i) >> 8) / 2^24 the draw of position i: the upper
 * with probability (x - a) / (b - a), so the rounded value's expectation is x. h(i) is
 * mix32((low 32 bits of i) ^ seed ^ (high 32 bits of i) * 0x9e3779b9). Values outside the
 * levels' range, non-finite ones, equal neighbours and the protected positions (ascending)
 * keep their index. Branch-free between protected positions, so the compiler vectorises it
 * (AVX2 gathers where the processor has them: the same integer and float32 operations, so
 * the same indices); random branches mispredicted half the time (14.6 ns an entry). */
static inline void round_run_any(const float *restrict v, int64_t lo, int64_t hi,
                                 const float *restrict levels, int32_t n_levels,
                                 uint32_t seed, uint8_t *restrict idx) {
    /* a run never crosses a multiple of 2^32 (the caller splits there), so the high half
     * of the position is the run's own; masks instead of branches, restrict for the
     * aliasing a uint8_t store would otherwise allow: the compiler vectorises the loop */
    int32_t top = n_levels > 1 ? 1 : 0;
    uint32_t key = ((uint32_t)((uint64_t)lo >> 32) * 0x9e3779b9U) ^ seed;
    uint32_t low = (uint32_t)lo;
    const float *restrict vv = v + lo;
    uint8_t *restrict ii = idx + lo;
    int64_t m = hi - lo;
    for (int64_t j = 0; j < m; j++) {
        float x = vv[j];
        int32_t k = ii[j];
        int32_t a_i = k - (x < levels[k]);
        int32_t ok = (a_i >= 0) & (a_i + 1 < n_levels) & (x - x == 0.0f);
        int32_t a_c = a_i & -ok;
        float a = levels[a_c], b = levels[a_c + top];
        uint32_t h = ckz_mix32((low + (uint32_t)j) ^ key);
        float u = (float)(int32_t)(h >> 8) * (1.0f / 16777216.0f);
        int32_t up = u * (b - a) < x - a;
        int32_t take = ok & (b > a);
        ii[j] = (uint8_t)(k + ((a_i + up - k) & -take));
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) static void round_run_avx2(const float *v, int64_t lo,
                                                           int64_t hi, const float *levels,
                                                           int32_t n_levels, uint32_t seed,
                                                           uint8_t *idx) {
    round_run_any(v, lo, hi, levels, n_levels, seed, idx);
}
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* round_run_any sixteen entries at a time with AVX-512 for codebooks of up to 32 levels: the
 * three level lookups by a permute of the levels held in two registers (vpermi2ps) where the
 * compiler's AVX2 loop gathers them (three gathers per eight entries, about 24 cycles each
 * where the processor carries the gather data sampling mitigation); the same integer and
 * float32 operations in the same order, so the same indices. */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static void
round_run_avx512(const float *v, int64_t lo, int64_t hi, const float *levels, int32_t n_levels,
                 uint32_t seed, uint8_t *idx) {
    float lev[32] = {0.0f};
    memcpy(lev, levels, (size_t)n_levels * sizeof *lev);
    const __m512 l0 = _mm512_loadu_ps(lev), l1 = _mm512_loadu_ps(lev + 16);
    const __m512i top = _mm512_set1_epi32(n_levels > 1 ? 1 : 0), one = _mm512_set1_epi32(1);
    const __m512i last = _mm512_set1_epi32(n_levels - 1);
    const __m512i key = _mm512_set1_epi32(
        (int)(((uint32_t)((uint64_t)lo >> 32) * 0x9e3779b9U) ^ seed));
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i m1 = _mm512_set1_epi32(0x7feb352d), m2 = _mm512_set1_epi32((int)0x846ca68bU);
    const __m512 scale = _mm512_set1_ps(1.0f / 16777216.0f);
    uint32_t low = (uint32_t)lo;
    int64_t m = hi - lo, j = 0;
    for (; j + 16 <= m; j += 16) {
        __m512 x = _mm512_loadu_ps(v + lo + j);
        __m512i k = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(idx + lo + j)));
        __m512i a_i = _mm512_mask_sub_epi32(
            k, _mm512_cmp_ps_mask(x, _mm512_permutex2var_ps(l0, k, l1), _CMP_LT_OQ), k, one);
        __mmask16 ok = _mm512_cmpge_epi32_mask(a_i, _mm512_setzero_si512()) &
                       _mm512_cmplt_epi32_mask(a_i, last) &
                       _mm512_cmp_ps_mask(_mm512_sub_ps(x, x), _mm512_setzero_ps(), _CMP_EQ_OQ);
        __m512i a_c = _mm512_maskz_mov_epi32(ok, a_i);
        __m512 a = _mm512_permutex2var_ps(l0, a_c, l1);
        __m512 b = _mm512_permutex2var_ps(l0, _mm512_add_epi32(a_c, top), l1);
        __m512i h = _mm512_xor_si512(
            _mm512_add_epi32(_mm512_set1_epi32((int)(low + (uint32_t)j)), lane), key);
        h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
        h = _mm512_mullo_epi32(h, m1);
        h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
        h = _mm512_mullo_epi32(h, m2);
        h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
        __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), scale);
        __mmask16 up = _mm512_cmp_ps_mask(_mm512_mul_ps(u, _mm512_sub_ps(b, a)),
                                          _mm512_sub_ps(x, a), _CMP_LT_OQ);
        __mmask16 take = ok & _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ);
        __m512i moved = _mm512_mask_add_epi32(a_i, up, a_i, one);
        _mm_storeu_si128((__m128i *)(idx + lo + j),
                         _mm512_cvtepi32_epi8(_mm512_mask_mov_epi32(k, take, moved)));
    }
    round_run_any(v, lo + j, hi, levels, n_levels, seed, idx);
}
#endif

static void round_run(const float *v, int64_t lo, int64_t hi, const float *levels,
                      int32_t n_levels, uint32_t seed, uint8_t *idx) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (ckz_avx2_ok()) { /* decided once: getenv per run between protected entries costs */
        if (n_levels <= 32 && ckz_avx512_ok()) /* CKPTZIP_NO_AVX512: the AVX2 loop */
            round_run_avx512(v, lo, hi, levels, n_levels, seed, idx);
        else
            round_run_avx2(v, lo, hi, levels, n_levels, seed, idx);
        return;
    }
#endif
    round_run_any(v, lo, hi, levels, n_levels, seed, idx);
}

static void round_span(const float *v, int64_t lo, int64_t hi, const float *levels,
                       int32_t n_levels, uint32_t seed, uint8_t *idx) {
    while (lo < hi) { /* split at multiples of 2^32: a run keeps one high half */
        int64_t edge = (int64_t)(((uint64_t)lo >> 32) + 1) << 32;
        int64_t end = edge < hi ? edge : hi;
        round_run(v, lo, end, levels, n_levels, seed, idx);
        lo = end;
    }
}

CKZ_API void ckz_round_stochastic(const float *v, int64_t n, const float *levels,
                                  int32_t n_levels, const int64_t *prot, int64_t n_prot,
                                  uint32_t seed, uint8_t *idx) {
    int64_t start = 0;
    for (int64_t j = 0; j < n_prot; j++) { /* the runs between protected positions */
        int64_t p = prot[j];
        if (p < start || p >= n) continue;
        round_span(v, start, p, levels, n_levels, seed, idx);
        start = p + 1;
    }
    round_span(v, start, n, levels, n_levels, seed, idx);
}

/* Σ (y - x)² and Σ x² in float64 over the entries where x is finite: a residual's relative
 * error against its reconstruction y, in one pass (summed by blocks of 4096, as above) */
CKZ_API void ckz_residual_error(const float *x, const float *y, int64_t n, double *out) {
    double err = 0.0, norm = 0.0;
    for (int64_t lo = 0; lo < n; lo += 4096) {
        int64_t hi = lo + 4096 < n ? lo + 4096 : n;
        double e = 0.0, m = 0.0;
        for (int64_t i = lo; i < hi; i++) {
            double a = (double)x[i];
            if (!isfinite(a)) continue;
            double d = (double)y[i] - a;
            e += d * d;
            m += a * a;
        }
        err += e;
        norm += m;
    }
    out[0] = err;
    out[1] = norm;
}

/* -- bit packing: LSB-first stream of `bits`-bit indices ----------------------------------*/
/* Eight indices of `bits` bits make `bits` whole bytes: each group of eight is put together
 * in one little-endian word and stored with one 8-byte store (its top bytes are overwritten
 * by the next group's), while at least 8 bytes of output are left past the group's start
 * (bits a constant where this is inlined: fixed shifts, a loop the compiler vectorises; 0.1
 * ns an index at 5 bits against 0.8 for the bit-at-a-time loop). ORs every index into
 * `*seen`. Returns how many indices it packed (a multiple of 8). */
static inline __attribute__((always_inline)) int64_t pack_groups(const uint8_t *idx, int64_t n,
                                                                  int32_t bits, uint8_t *out,
                                                                  uint8_t *seen) {
    int64_t i = 0;
    uint8_t any = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* the group at i starts at byte i / 8 * bits of ceil(n * bits / 8): room for 8 bytes
     * while i + 64 <= n, as in unpack_groups */
    for (; i + 64 <= n; i += 8, out += bits) {
        uint64_t w = 0;
        for (int32_t l = 0; l < 8; l++) {
            any |= idx[i + l];
            w |= (uint64_t)idx[i + l] << (l * bits);
        }
        memcpy(out, &w, 8);
    }
#endif
    *seen |= any;
    return i;
}

CKZ_API int32_t ckz_pack(const uint8_t *idx, int64_t n, int32_t bits, uint8_t *out) {
    if (8 % bits == 0) { /* 1, 2, 4 bits: whole indices per byte */
        int32_t per = 8 / bits;
        int64_t full = n / per;
        if (bits == 4) /* the default 16 bins: a loop of constant shape the compiler vectorises */
            for (int64_t j = 0; j < full; j++)
                out[j] = (uint8_t)(idx[2 * j] | (idx[2 * j + 1] << 4));
        else
            for (int64_t j = 0; j < full; j++) {
                const uint8_t *in = idx + j * per;
                uint8_t byte = 0;
                for (int32_t l = 0; l < per; l++) byte |= (uint8_t)(in[l] << (l * bits));
                out[j] = byte;
            }
        if (full * per < n) {
            uint8_t byte = 0;
            for (int64_t i = full * per; i < n; i++)
                byte |= (uint8_t)(idx[i] << ((i - full * per) * bits));
            out[full] = byte;
        }
        return 0;
    }
    int64_t i = 0;
    uint8_t seen = 0;
    switch (bits) {
    case 3: i = pack_groups(idx, n, 3, out, &seen); break;
    case 5: i = pack_groups(idx, n, 5, out, &seen); break;
    case 6: i = pack_groups(idx, n, 6, out, &seen); break;
    case 7: i = pack_groups(idx, n, 7, out, &seen); break;
    default: break;
    }
    out += (i / 8) * bits;
    uint64_t acc = 0;
    int32_t have = 0;
    for (; i < n; i++) {
        seen |= idx[i];
        acc |= (uint64_t)idx[i] << have;
        have += bits;
        while (have >= 8) {
            *out++ = (uint8_t)acc;
            acc >>= 8;
            have -= 8;
        }
    }
    if (have > 0) *out = (uint8_t)acc;
    return seen;
}

/* Eight indices of `bits` bits fill `bits` whole bytes: the stream's groups of eight, each
 * taken as one little-endian word and cut in eight (bits a constant where this is inlined,
 * so the cuts are fixed shifts). A word is one 8-byte load while at least 64 indices (8 *
 * bits bytes) are left, so it never reads past the stream. Returns how many indices it
 * wrote (n rounded down to 8). */
static inline __attribute__((always_inline)) int64_t unpack_groups(const uint8_t *data,
                                                                    int64_t n, int32_t bits,
                                                                    uint8_t *out) {
    const uint8_t mask = (uint8_t)((1u << bits) - 1u);
    int64_t i = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; i + 64 <= n; i += 8, data += bits) {
        uint64_t w;
        memcpy(&w, data, 8);
        for (int32_t l = 0; l < 8; l++) out[i + l] = (uint8_t)(w >> (l * bits)) & mask;
    }
#endif
    for (; i + 8 <= n; i += 8, data += bits) {
        uint64_t w = 0;
        for (int32_t b = 0; b < bits; b++) w |= (uint64_t)data[b] << (8 * b);
        for (int32_t l = 0; l < 8; l++) out[i + l] = (uint8_t)(w >> (l * bits)) & mask;
    }
    return i;
}

/* The LSB-first `bits`-bit stream of ckptzip/packing.py (1 <= bits <= 8) into n indices:
 * whole groups of eight first (one word per `bits` bytes: 0.32 ns an index at 3 bits against
 * 0.65 for the bit-at-a-time loop, 0.29 against 0.62 at 2), that loop for the last few. */
CKZ_API void ckz_unpack(const uint8_t *data, int64_t n, int32_t bits, uint8_t *out) {
    int64_t i;
    switch (bits) {
    case 1: i = unpack_groups(data, n, 1, out); break;
    case 2: i = unpack_groups(data, n, 2, out); break;
    case 3: i = unpack_groups(data, n, 3, out); break;
    case 4: i = unpack_groups(data, n, 4, out); break;
    case 5: i = unpack_groups(data, n, 5, out); break;
    case 6: i = unpack_groups(data, n, 6, out); break;
    case 7: i = unpack_groups(data, n, 7, out); break;
    case 8: i = unpack_groups(data, n, 8, out); break;
    default: i = 0; /* no writer's width: the loop below, as for any other */
    }
    data += i / 8 * bits;
    uint64_t acc = 0;
    int32_t have = 0;
    uint8_t mask = (uint8_t)((1u << bits) - 1u);
    for (; i < n; i++) {
        while (have < bits) {
            acc |= (uint64_t)(*data++) << have;
            have += 8;
        }
        out[i] = (uint8_t)acc & mask;
        acc >>= bits;
        have -= bits;
    }
}

/* -- decoding: levels gathered straight into the output tensor's memory ------------------*/

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* out[j] = table[idx[j]] (with base: base[j] + table[idx[j]], one IEEE addition in the
 * entries' float type) for j < k, 64 indices at a time where all 64 address the first 16
 * entries (2- and 4-byte entries: the first 32), by a permute of the table held in one or
 * two registers (vpermi2d, vpermi2pd, vpermw) instead of a load per element; a block with a
 * larger index is left to the caller. Returns how many leading indices it wrote (a multiple
 * of 64, or less where a block it could not take stopped it). 32 float32 entries (5-bit
 * levels): ckz_gather of 2M indices into a new tensor took 0.06-0.12 ns an index, 0.39 by
 * the scalar loop. */
__attribute__((target("avx512f,avx512bw"))) static int64_t
gather_avx512(const uint8_t *idx, int64_t k, const void *table, int32_t size, const void *base,
              void *out) {
    const __m512i high = _mm512_set1_epi8((char)(size == 8 ? 0xF0 : 0xE0));
    int64_t j = 0;
    if (size == 4) {
        const __m512i lo = _mm512_loadu_si512(table);
        const __m512i hi = _mm512_loadu_si512((const void *)((const uint32_t *)table + 16));
        for (; j + 64 <= k; j += 64) {
            if (_mm512_test_epi8_mask(_mm512_loadu_si512((const void *)(idx + j)), high)) break;
            for (int q = 0; q < 64; q += 16) {
                __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(idx + j + q)));
                __m512i g = _mm512_permutex2var_epi32(lo, x, hi);
                if (base)
                    g = _mm512_castps_si512(_mm512_add_ps(
                        _mm512_loadu_ps((const float *)base + j + q), _mm512_castsi512_ps(g)));
                _mm512_storeu_si512((void *)((uint32_t *)out + j + q), g);
            }
        }
    } else if (size == 8) {
        const __m512i lo = _mm512_loadu_si512(table);
        const __m512i hi = _mm512_loadu_si512((const void *)((const uint64_t *)table + 8));
        for (; j + 64 <= k; j += 64) {
            if (_mm512_test_epi8_mask(_mm512_loadu_si512((const void *)(idx + j)), high)) break;
            for (int q = 0; q < 64; q += 8) {
                __m512i x = _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(idx + j + q)));
                __m512i g = _mm512_permutex2var_epi64(lo, x, hi);
                if (base)
                    g = _mm512_castpd_si512(_mm512_add_pd(
                        _mm512_loadu_pd((const double *)base + j + q), _mm512_castsi512_pd(g)));
                _mm512_storeu_si512((void *)((uint64_t *)out + j + q), g);
            }
        }
    } else if (size == 2 && base == NULL) {
        const __m512i t = _mm512_loadu_si512(table);
        for (; j + 64 <= k; j += 64) {
            if (_mm512_test_epi8_mask(_mm512_loadu_si512((const void *)(idx + j)), high)) break;
            for (int q = 0; q < 64; q += 32) {
                __m512i x =
                    _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(idx + j + q)));
                _mm512_storeu_si512((void *)((uint16_t *)out + j + q),
                                    _mm512_permutexvar_epi16(x, t));
            }
        }
    }
    return j;
}
#endif

/* The leading indices of out[j] = table[idx[j]] (+ base[j]) the vector pass takes: see
 * gather_avx512 (0 where the processor or CKPTZIP_NO_AVX512 rules it out). The table holds
 * 256 entries of `size` bytes. Shared with _entropy.c's put. */
int64_t ckz_gather_fast(const uint8_t *idx, int64_t k, const void *table, int32_t size,
                        const void *base, void *out) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (ckz_avx512_ok()) return gather_avx512(idx, k, table, size, base, out);
#endif
    (void)idx, (void)k, (void)table, (void)size, (void)base, (void)out;
    return 0;
}

/* out[j] = table[idx[j]] for j in [lo, hi), one element at a time. */
static void gather_any(const uint8_t *idx, int64_t lo, int64_t hi, const void *table,
                       int32_t size, void *out) {
    if (size == 2) {
        const uint16_t *t = (const uint16_t *)table;
        uint16_t *o = (uint16_t *)out;
        for (int64_t i = lo; i < hi; i++) o[i] = t[idx[i]];
    } else if (size == 4) {
        const uint32_t *t = (const uint32_t *)table;
        uint32_t *o = (uint32_t *)out;
        for (int64_t i = lo; i < hi; i++) o[i] = t[idx[i]];
    } else {
        const uint64_t *t = (const uint64_t *)table;
        uint64_t *o = (uint64_t *)out;
        for (int64_t i = lo; i < hi; i++) o[i] = t[idx[i]];
    }
}

CKZ_API void ckz_gather(const uint8_t *idx, int64_t n, const void *table, int32_t size,
                        void *out) {
    int64_t done = 0;
    if (ckz_avx512_ok())
        while (done < n) { /* the vector pass; a block it leaves, one at a time; again */
            done += ckz_gather_fast(idx + done, n - done, table, size, NULL,
                                    (uint8_t *)out + done * size);
            int64_t stop = done + 64 < n ? done + 64 : n;
            gather_any(idx, done, stop, table, size, out);
            done = stop;
        }
    gather_any(idx, done, n, table, size, out);
}

/* -- delta by parent bin: cyclic difference and its rearrangement in one pass -----------
 *
 * groups[b] = #{i : prev[i] == b}; with rearrange, the differences (prev - now) mod bins are
 * written group after group, each in position order (a stable counting sort by prev).
 * Returns max(prev) | max(now) << 8 so the caller can check every index is below bins.
 */
CKZ_API void ckz_bin_counts(const uint8_t *prev, int64_t n, int64_t *groups); /* _delta.c */

#define DELTA_COMPRESS_BINS 32 /* the vector scatter's limit: one compare per bin */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* The rearranged differences 64 positions at a time, for bins <= DELTA_COMPRESS_BINS: for
 * each bin b, the differences at the positions holding b, packed in order (vpcompressb), go
 * to group b's cursor by a masked store (nothing past the group's next free byte is
 * touched), which is what the scalar loop's cursor writes one by one. The scalar loop stalls
 * on the cursor of the most common bin (each write waits for the last increment). Returns
 * where it stopped (a multiple of 64); the caller finishes with the advanced offsets. */
__attribute__((target("avx512f,avx512bw,avx512vbmi2,bmi2,popcnt"))) static int64_t
delta_encode_avx512(const uint8_t *prev, const uint8_t *now, int64_t n, int32_t bins,
                    int64_t *offset, uint8_t *out) {
    const __m512i vbins = _mm512_set1_epi8((char)bins);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i p = _mm512_loadu_si512((const void *)(prev + i));
        __m512i q = _mm512_loadu_si512((const void *)(now + i));
        __m512i d = _mm512_sub_epi8(p, q);
        d = _mm512_mask_add_epi8(d, _mm512_cmplt_epu8_mask(p, q), d, vbins);
        for (int32_t b = 0; b < bins; b++) {
            __mmask64 m = _mm512_cmpeq_epi8_mask(p, _mm512_set1_epi8((char)b));
            uint32_t k = (uint32_t)_mm_popcnt_u64(m);
            _mm512_mask_storeu_epi8(out + offset[b], _bzhi_u64(~0ULL, k),
                                    _mm512_maskz_compress_epi8(m, d));
            offset[b] += k;
        }
    }
    return i;
}
#endif

CKZ_API int32_t ckz_delta_encode(const uint8_t *prev, const uint8_t *now, int64_t n,
                                 int32_t bins, int32_t rearrange, uint8_t *out,
                                 int64_t *groups) {
    int64_t offset[256];
    uint8_t top_prev = 0, top_now = 0;
    /* the group sizes by the counting pass (four tables, or a popcount per bin), the tops
     * by a maximum the compiler vectorises: branches on the data here cost more than the
     * rest of the pass */
    ckz_bin_counts(prev, n, groups);
    for (int b = 255; b > 0; b--)
        if (groups[b]) {
            top_prev = (uint8_t)b;
            break;
        }
    for (int64_t i = 0; i < n; i++) top_now = now[i] > top_now ? now[i] : top_now;
    if (top_prev >= bins || top_now >= bins) return top_prev | (top_now << 8);
    if (!rearrange) {
        for (int64_t i = 0; i < n; i++) {
            int32_t d = (int32_t)prev[i] - (int32_t)now[i];
            out[i] = (uint8_t)(d < 0 ? d + bins : d);
        }
        return top_prev | (top_now << 8);
    }
    int64_t acc = 0;
    for (int b = 0; b < 256; b++) {
        offset[b] = acc;
        acc += groups[b];
    }
    int64_t i = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (bins <= DELTA_COMPRESS_BINS && ckz_avx512_ok())
        i = delta_encode_avx512(prev, now, n, bins, offset, out);
#endif
    for (; i < n; i++) {
        int32_t d = (int32_t)prev[i] - (int32_t)now[i];
        if (d < 0) d += bins;
        out[offset[prev[i]]++] = (uint8_t)d;
    }
    return top_prev | (top_now << 8);
}

/* Whether the AVX-512 passes may run (decided once): the processor has AVX-512 BW, DQ and
 * VBMI2 (every processor with VBMI2 so far has the other two) and CKPTZIP_NO_AVX512 is
 * unset, which makes a process take the loops other processors run (the same bits either
 * way). */
CKZ_API int32_t ckz_avx512_ok(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static int ok = -1; /* the race of two first calls writes the same value */
    if (ok < 0)
        ok = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vbmi2") && getenv("CKPTZIP_NO_AVX512") == NULL;
    return ok;
#else
    return 0;
#endif
}

/* The scalar inverse over positions [lo, n), offset[b] the next symbol of group b. */
static uint8_t delta_apply_any(const uint8_t *prev, const uint8_t *sym, int64_t lo, int64_t n,
                               int32_t bins, int32_t rearrange, int64_t *offset,
                               uint8_t *out) {
    uint8_t bad = 0;
    for (int64_t i = lo; i < n; i++) {
        uint8_t p = prev[i];
        uint8_t s = sym[rearrange ? offset[p]++ : i];
        bad |= (uint8_t)(s >= bins);
        int32_t v = (int32_t)p - (int32_t)s;
        if (v < 0) v += bins;
        out[i] = (uint8_t)v;
    }
    return bad;
}

#define DELTA_EXPAND_BINS 32 /* up to here the vector pass beats the scalar one */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* The rearranged inverse 64 positions at a time, for bins <= DELTA_EXPAND_BINS: for each
 * bin b, the positions holding b take the next popcount of group b's symbols, in order
 * (vpexpandb), which is what the scalar loop's cursor hands out one by one. The loads stop
 * at the stream's end (a masked load past it). Returns the position it stopped at (a
 * multiple of 64; the caller finishes the tail with the advanced offsets) and ORs a symbol
 * >= bins into *bad. 0.22 ns a symbol against the scalar loop's 0.97 on the deltas of the
 * --quick throughput chain (AMD EPYC, 16 bins). */
__attribute__((target("avx512f,avx512bw,avx512vbmi2,bmi2,popcnt"))) static int64_t
delta_apply_avx512(const uint8_t *prev, const uint8_t *sym, int64_t n, int32_t bins,
                   int64_t *offset, uint8_t *out, uint8_t *bad) {
    const __m512i vbins = _mm512_set1_epi8((char)bins);
    __mmask64 over = 0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i p = _mm512_loadu_si512((const void *)(prev + i));
        __m512i s = _mm512_setzero_si512();
        for (int32_t b = 0; b < bins; b++) {
            __mmask64 m = _mm512_cmpeq_epi8_mask(p, _mm512_set1_epi8((char)b));
            int64_t at = offset[b], left = n - at;
            __m512i src = left >= 64 ? _mm512_loadu_si512((const void *)(sym + at))
                                     : _mm512_maskz_loadu_epi8(_bzhi_u64(~0ULL, (uint32_t)left),
                                                               sym + at);
            s = _mm512_mask_expand_epi8(s, m, src);
            offset[b] = at + (int64_t)_mm_popcnt_u64(m);
        }
        over |= _mm512_cmpge_epu8_mask(s, vbins);
        __m512i v = _mm512_sub_epi8(p, s);
        v = _mm512_mask_add_epi8(v, _mm512_cmplt_epu8_mask(p, s), v, vbins);
        _mm512_storeu_si512((void *)(out + i), v);
    }
    *bad |= (uint8_t)(over != 0);
    return i;
}
#endif

/* The inverse; returns 0, or 1 when a symbol is >= bins. With rearrange, `known` (may be
 * NULL) holds the 256 group sizes of prev when the caller counted them already (its ANS
 * contexts need them): counting again here cost 40 % of this pass (a store-to-load chain on
 * the counter of the most common bin). */
CKZ_API int32_t ckz_delta_decode(const uint8_t *prev, const uint8_t *sym, int64_t n,
                                 int32_t bins, int32_t rearrange, const int64_t *known,
                                 uint8_t *out) {
    int64_t offset[256];
    int64_t groups[256];
    if (rearrange && known)
        memcpy(groups, known, sizeof groups);
    else if (rearrange)
        ckz_bin_counts(prev, n, groups);
    else
        memset(groups, 0, sizeof groups);
    int64_t acc = 0;
    for (int b = 0; b < 256; b++) {
        offset[b] = acc;
        acc += groups[b];
    }
    uint8_t bad = 0;
    int64_t done = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    /* a prev index >= bins (which the callers refuse before) would find no group here */
    if (rearrange && bins <= DELTA_EXPAND_BINS && ckz_avx512_ok()) {
        int64_t in_bins = 0;
        for (int b = 0; b < bins; b++) in_bins += groups[b];
        if (in_bins == n) done = delta_apply_avx512(prev, sym, n, bins, offset, out, &bad);
    }
#endif
    bad |= delta_apply_any(prev, sym, done, n, bins, rearrange, offset, out);
    return bad ? 1 : 0;
}

/* -- weighted 1-D k-means (k-means++ seeding, then Lloyd), rows advancing in lockstep ----
 *
 * The reference is NumPy (quantize._kmeans_pp and quantize._lloyd_1d); this is the same
 * arithmetic in the same order: sequential cumulative sums, squares as products, the
 * uniform draws given (rand[j * n_init + row] for draw j), every row iterated until all
 * rows' partitions repeat, and the empty-cluster branch taken for all rows when any row has
 * an empty cluster. `pts` is sorted, `w` > 0. Writes the n_init x k centres.
 */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int64_t count_le(const double *pts, int64_t n, double v) { /* #{pts <= v} */
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + ((hi - lo) >> 1);
        if (pts[mid] <= v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* pts[#{cdf < r * total}]: cdf is non-decreasing (weights >= 0), so a binary search
 * counts what the reference's comparison of every entry counts */
static double draw_from(const double *pts, const double *cdf, int64_t n, double r) {
    double u = r * cdf[n - 1];
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + ((hi - lo) >> 1);
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return pts[lo < n - 1 ? lo : n - 1];
}

static double draw(const double *pts, const double *p, int64_t n, double *cdf, double r) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) {
        acc = i == 0 ? p[0] : acc + p[i];
        cdf[i] = acc;
    }
    return draw_from(pts, cdf, n, r);
}

CKZ_API int32_t ckz_kmeans(const double *pts, const double *w, int64_t n, int32_t k,
                           int32_t n_init, const double *rand, int32_t max_iter, double *c) {
    double *d2 = (double *)malloc(sizeof(double) * (size_t)n * (size_t)n_init);
    double *p = (double *)malloc(sizeof(double) * (size_t)n);
    double *cdf = (double *)malloc(sizeof(double) * (size_t)n);
    double *cw = (double *)malloc(sizeof(double) * (size_t)(n + 1));
    double *cwp = (double *)malloc(sizeof(double) * (size_t)(n + 1));
    int64_t *bounds = (int64_t *)malloc(sizeof(int64_t) * (size_t)n_init * (size_t)(k + 1));
    int64_t *previous = (int64_t *)malloc(sizeof(int64_t) * (size_t)n_init * (size_t)(k + 1));
    double *wsum = (double *)malloc(sizeof(double) * (size_t)n_init * (size_t)k);
    double *psum = (double *)malloc(sizeof(double) * (size_t)n_init * (size_t)k);
    if (!d2 || !p || !cdf || !cw || !cwp || !bounds || !previous || !wsum || !psum) {
        free(d2), free(p), free(cdf), free(cw), free(cwp);
        free(bounds), free(previous), free(wsum), free(psum);
        return -1;
    }
    /* k-means++: centre 0 drawn by w, centre j by w * D^2 */
    for (int32_t row = 0; row < n_init; row++) {
        double *dr = d2 + (size_t)row * (size_t)n;
        double c0 = draw(pts, w, n, cdf, rand[row]);
        c[(size_t)row * k] = c0;
        for (int64_t i = 0; i < n; i++) {
            double t = pts[i] - c0;
            dr[i] = t * t;
        }
    }
    for (int32_t j = 1; j < k; j++) {
        for (int32_t row = 0; row < n_init; row++) {
            double *dr = d2 + (size_t)row * (size_t)n;
            double acc = 0.0; /* the cumulative sum of w * D^2, in the reference's order */
            for (int64_t i = 0; i < n; i++) {
                double pi = w[i] * dr[i];
                acc = i == 0 ? pi : acc + pi;
                cdf[i] = acc;
            }
            /* a row whose points are all taken (every w * D^2 is 0, so is their sum)
             * repeats a centre (merged later) */
            double r = rand[(size_t)j * n_init + row];
            double cj = acc > 0.0 ? draw_from(pts, cdf, n, r) : draw(pts, w, n, cdf, r);
            c[(size_t)row * k + j] = cj;
            for (int64_t i = 0; i < n; i++) {
                double t = pts[i] - cj;
                double t2 = t * t;
                if (t2 < dr[i]) dr[i] = t2;
            }
        }
    }
    for (int32_t row = 0; row < n_init; row++)
        qsort(c + (size_t)row * k, (size_t)k, sizeof(double), cmp_double);
    /* Lloyd on prefix sums */
    cw[0] = 0.0;
    cwp[0] = 0.0;
    for (int64_t i = 0; i < n; i++) {
        cw[i + 1] = i == 0 ? w[0] : cw[i] + w[i];
        double wp = w[i] * pts[i];
        cwp[i + 1] = i == 0 ? wp : cwp[i] + wp;
    }
    for (int32_t row = 0; row < n_init; row++) {
        int64_t *b = bounds + (size_t)row * (k + 1);
        b[0] = 0;
        b[k] = n;
        for (int32_t j = 1; j < k; j++) previous[(size_t)row * (k + 1) + j] = -1;
    }
    for (int32_t it = 0; it < max_iter; it++) {
        int same = 1;
        for (int32_t row = 0; row < n_init; row++) {
            const double *cr = c + (size_t)row * k;
            int64_t *b = bounds + (size_t)row * (k + 1);
            int64_t *pr = previous + (size_t)row * (k + 1);
            for (int32_t j = 1; j < k; j++) {
                b[j] = count_le(pts, n, 0.5 * (cr[j] + cr[j - 1]));
                same &= b[j] == pr[j];
            }
        }
        if (same) break;
        int all_nonzero = 1;
        for (int32_t row = 0; row < n_init; row++) {
            int64_t *b = bounds + (size_t)row * (k + 1);
            int64_t *pr = previous + (size_t)row * (k + 1);
            for (int32_t j = 1; j < k; j++) pr[j] = b[j];
            for (int32_t j = 0; j < k; j++) {
                double ws = cw[b[j + 1]] - cw[b[j]];
                wsum[(size_t)row * k + j] = ws;
                psum[(size_t)row * k + j] = cwp[b[j + 1]] - cwp[b[j]];
                all_nonzero &= ws != 0.0;
            }
        }
        for (int32_t row = 0; row < n_init; row++) {
            double *cr = c + (size_t)row * k;
            for (int32_t j = 0; j < k; j++) {
                double ws = wsum[(size_t)row * k + j], ps = psum[(size_t)row * k + j];
                if (all_nonzero)
                    cr[j] = ps / ws;
                else if (ws > 0.0)
                    cr[j] = ps / ws; /* an empty cluster keeps its centre */
            }
            if (!all_nonzero) qsort(cr, (size_t)k, sizeof(double), cmp_double);
        }
    }
    free(d2), free(p), free(cdf), free(cw), free(cwp);
    free(bounds), free(previous), free(wsum), free(psum);
    return 0;
}

/* -- ANS: a stack coder word-for-word compatible with constriction's AnsCoder -----------
 *
 * 32-bit words, 64-bit state, 24-bit precision; the model of a context is constriction's
 * Categorical(counts, perfect=False), defined once in _ans.h for this coder and the lanes of
 * _entropy.c. The compressed words are the bulk, then the state's low word and (when
 * non-zero) its high word.
 */
#include "_ans.h"    /* ANS_PRECISION, ANS_TOTAL, ckz_ans_model */
#include "_search.h" /* ckz_count_below16: the assignment's search */

static int distinct(const uint32_t *counts, int32_t alphabet) {
    int k = 0;
    for (int32_t s = 0; s < alphabet; s++) k += counts[s] != 0;
    return k;
}

/* Counts per context (contexts x alphabet, from symbols split at bounds). */
CKZ_API void ckz_ans_counts(const uint8_t *sym, const int64_t *bounds, int32_t contexts,
                            int32_t alphabet, uint32_t *counts) {
    memset(counts, 0, sizeof(uint32_t) * (size_t)contexts * (size_t)alphabet);
    uint32_t c4[4][256];
    for (int32_t c = 0; c < contexts; c++) {
        uint32_t *row = counts + (size_t)c * (size_t)alphabet;
        int64_t i = bounds[c], hi = bounds[c + 1];
        if (hi - i < 4096 || alphabet > 256) {
            for (; i < hi; i++) row[sym[i]]++;
            continue;
        }
        /* four tables: equal neighbours (most symbols are one or two levels) do not wait on
         * each other's store */
        memset(c4, 0, sizeof c4);
        for (; i + 4 <= hi; i += 4) {
            c4[0][sym[i]]++;
            c4[1][sym[i + 1]]++;
            c4[2][sym[i + 2]]++;
            c4[3][sym[i + 3]]++;
        }
        for (; i < hi; i++) c4[0][sym[i]]++;
        for (int32_t s = 0; s < alphabet; s++) row[s] += c4[0][s] + c4[1][s] + c4[2][s] + c4[3][s];
    }
}

/* Encode every context back to front (a stack decodes last-in first-out); returns the
 * number of words written, or -1 when `capacity` would be exceeded. */
CKZ_API int64_t ckz_ans_encode(const uint8_t *sym, const int64_t *bounds, int32_t contexts,
                               int32_t alphabet, const uint32_t *counts, uint32_t *words,
                               int64_t capacity) {
    uint32_t left[257];
    ckz_div div[256];
    uint64_t state = 0;
    int64_t nw = 0;
    for (int32_t c = contexts - 1; c >= 0; c--) {
        const uint32_t *row = counts + (size_t)c * (size_t)alphabet;
        if (distinct(row, alphabet) <= 1) continue;
        ckz_ans_model(row, alphabet, left);
        ckz_ans_divisors(row, alphabet, left, div);
        for (int64_t i = bounds[c + 1] - 1; i >= bounds[c]; i--) {
            uint32_t s = sym[i];
            uint64_t prob = (uint64_t)(left[s + 1] - left[s]);
            if ((state >> (64 - ANS_PRECISION)) >= prob) {
                if (nw >= capacity) return -1;
                words[nw++] = (uint32_t)state;
                state >>= 32;
            }
            uint64_t prefix = ckz_ans_quotient(state, prob, div[s]);
            uint64_t rem = state - prefix * prob;
            state = (prefix << ANS_PRECISION) | (uint64_t)(left[s] + rem);
        }
    }
    if (state != 0) {
        if (nw + 2 > capacity) return -1;
        words[nw++] = (uint32_t)state;
        if (state >> 32) words[nw++] = (uint32_t)(state >> 32);
    }
    return nw;
}

/* Decode every context front to back into out. Returns 0 when the coder ends empty,
 * 1 when coded data is left, 2 when the words end in a zero word (not a coder's output). */
CKZ_API int32_t ckz_ans_decode(const uint32_t *words, int64_t nw, const int64_t *bounds,
                               int32_t contexts, int32_t alphabet, const uint32_t *counts,
                               uint8_t *out) {
    uint32_t left[257];
    uint64_t dtab[1 << ANS_DSLOT_BITS];
    if (nw > 0 && words[nw - 1] == 0) return 2;
    uint64_t state = 0;
    int64_t top = nw;
    if (top > 0) state = words[--top];
    if (top > 0) state = (state << 32) | words[--top];
    for (int32_t c = 0; c < contexts; c++) {
        const uint32_t *row = counts + (size_t)c * (size_t)alphabet;
        int64_t lo = bounds[c], hi = bounds[c + 1];
        if (hi <= lo) continue;
        if (distinct(row, alphabet) <= 1) {
            uint8_t only = 0;
            for (int32_t s = 0; s < alphabet; s++)
                if (row[s]) only = (uint8_t)s;
            memset(out + lo, only, (size_t)(hi - lo));
            continue;
        }
        ckz_ans_model(row, alphabet, left);
        ckz_ans_dtable(left, dtab);
        for (int64_t i = lo; i < hi; i++) {
            uint32_t sy;
            ANS_ADVANCE(dtab, left, state, sy);
            if (state < ((uint64_t)1 << 32) && top > 0) state = (state << 32) | words[--top];
            out[i] = (uint8_t)sy;
        }
    }
    return state == 0 ? 0 : 1;
}

/* Two independent streams decoded in one loop: ckz_ans_decode of each, the same symbols and
 * status, but each step of one stream waits on its own last step only, so the two chains of
 * dependent loads and multiplies overlap (the run tokens and the other symbols of an "rle+ans"
 * payload are two such streams of about the same length). Returns status_a | status_b << 2. */
typedef struct {
    const uint32_t *words;
    int64_t top;
    uint64_t state;
    const int64_t *bounds;
    int32_t contexts, alphabet, c;
    const uint32_t *counts;
    uint8_t *out;
    int64_t i, hi; /* the current context's next position and end */
    uint32_t left[257];
    uint64_t dtab[1 << ANS_DSLOT_BITS];
} ans_stream;

static int32_t ans_stream_open(ans_stream *d, const uint32_t *words, int64_t nw,
                               const int64_t *bounds, int32_t contexts, int32_t alphabet,
                               const uint32_t *counts, uint8_t *out) {
    d->words = words, d->top = nw, d->state = 0, d->bounds = bounds;
    d->contexts = contexts, d->alphabet = alphabet, d->counts = counts, d->out = out;
    d->c = -1, d->i = d->hi = 0;
    if (nw > 0 && words[nw - 1] == 0) return 2;
    if (d->top > 0) d->state = words[--d->top];
    if (d->top > 0) d->state = (d->state << 32) | words[--d->top];
    return 0;
}

/* Move to the next context with symbols to decode (filling single-symbol ones); 0 at the end */
static int ans_stream_next(ans_stream *d) {
    while (++d->c < d->contexts) {
        const uint32_t *row = d->counts + (size_t)d->c * (size_t)d->alphabet;
        int64_t lo = d->bounds[d->c], hi = d->bounds[d->c + 1];
        if (hi <= lo) continue;
        if (distinct(row, d->alphabet) <= 1) {
            uint8_t only = 0;
            for (int32_t s = 0; s < d->alphabet; s++)
                if (row[s]) only = (uint8_t)s;
            memset(d->out + lo, only, (size_t)(hi - lo));
            continue;
        }
        ckz_ans_model(row, d->alphabet, d->left);
        ckz_ans_dtable(d->left, d->dtab);
        d->i = lo, d->hi = hi;
        return 1;
    }
    return 0;
}

#define ANS_STEP(state, top, words, left, dtab, dst)                                       \
    do {                                                                                   \
        uint32_t y_;                                                                       \
        ANS_ADVANCE(dtab, left, state, y_);                                                \
        if ((state) < ((uint64_t)1 << 32) && (top) > 0)                                    \
            (state) = ((state) << 32) | (words)[--(top)];                                  \
        (dst) = (uint8_t)y_;                                                               \
    } while (0)

static void ans_stream_run(ans_stream *d, int64_t k) { /* k symbols of the current context */
    uint64_t state = d->state;
    int64_t top = d->top, i = d->i;
    const uint32_t *words = d->words, *left = d->left;
    const uint64_t *dtab = d->dtab;
    uint8_t *out = d->out;
    for (int64_t end = i + k; i < end; i++) ANS_STEP(state, top, words, left, dtab, out[i]);
    d->state = state, d->top = top, d->i = i;
}

CKZ_API int32_t ckz_ans_decode2(const uint32_t *words_a, int64_t nw_a, const int64_t *bounds_a,
                                int32_t contexts_a, int32_t alphabet_a,
                                const uint32_t *counts_a, uint8_t *out_a,
                                const uint32_t *words_b, int64_t nw_b, const int64_t *bounds_b,
                                int32_t contexts_b, int32_t alphabet_b,
                                const uint32_t *counts_b, uint8_t *out_b) {
    ans_stream *d = (ans_stream *)malloc(2 * sizeof(ans_stream));
    if (d == NULL) return -1;
    ans_stream *a = d, *b = d + 1;
    int32_t sa = ans_stream_open(a, words_a, nw_a, bounds_a, contexts_a, alphabet_a, counts_a,
                                 out_a);
    int32_t sb = ans_stream_open(b, words_b, nw_b, bounds_b, contexts_b, alphabet_b, counts_b,
                                 out_b);
    if (sa || sb) {
        free(d);
        return sa | (sb << 2);
    }
    int live_a = ans_stream_next(a), live_b = ans_stream_next(b);
    while (live_a && live_b) {
        int64_t k = a->hi - a->i < b->hi - b->i ? a->hi - a->i : b->hi - b->i;
        uint64_t st_a = a->state, st_b = b->state;
        int64_t top_a = a->top, top_b = b->top, ia = a->i, ib = b->i;
        const uint32_t *wa = a->words, *wb = b->words, *la = a->left, *lb = b->left;
        const uint64_t *ta = a->dtab, *tb = b->dtab;
        uint8_t *oa = a->out, *ob = b->out;
        for (int64_t j = 0; j < k; j++, ia++, ib++) {
            ANS_STEP(st_a, top_a, wa, la, ta, oa[ia]);
            ANS_STEP(st_b, top_b, wb, lb, tb, ob[ib]);
        }
        a->state = st_a, b->state = st_b, a->top = top_a, b->top = top_b, a->i = ia, b->i = ib;
        if (a->i == a->hi) live_a = ans_stream_next(a);
        if (b->i == b->hi) live_b = ans_stream_next(b);
    }
    for (; live_a; live_a = ans_stream_next(a)) ans_stream_run(a, a->hi - a->i);
    for (; live_b; live_b = ans_stream_next(b)) ans_stream_run(b, b->hi - b->i);
    sa = a->state == 0 ? 0 : 1;
    sb = b->state == 0 ? 0 : 1;
    free(d);
    return sa | (sb << 2);
}

/* == the quantizer's fused passes ========================================================
 *
 * Three passes over a tensor's values, none of which stores a per-element bucket code:
 *   ckz_key_scan     the sketch: every value's key (#{T < |x|} over one table of float32
 *                    thresholds T = gamma^k for every k a float32 can need, the same for all
 *                    tensors) counted by sign, with min, max and a non-finite flag;
 *   ckz_members      the positions of the (at most two) buckets a protect or prune cut-off
 *                    falls in, so the picks inside them are made on few values;
 *   ckz_assign_fused each value's level index (a lookup by its bucket code, computed again
 *                    from the bits, and a search among the cut-offs only in the buckets that
 *                    hold one), the protect and prune decisions (by value and position, as
 *                    the caller derived them from the sketch), and the measured error.
 *
 * The key of a value: lut[top 15 bits of |x|] is #{T < the smallest float with those bits};
 * one comparison finishes it where a slice of the float line holds at most one threshold
 * (every normal float at the default accuracy); a negative entry (-lower - 1) marks a slice
 * that holds more (subnormals), finished by a loop. T is padded with +inf.
 */
static inline int32_t ckz_key(const int32_t *lut, const float *t, uint32_t mag) {
    float ax = bits_to_float(mag);
    int32_t e = lut[mag >> PREFIX_SHIFT];
    if (e >= 0) return e + (t[e] < ax);
    e = -e - 1;
    while (t[e] < ax) e++;
    return e;
}

/* The key table in one load: pk[slice] = key << 16 | the low 16 bits of T[key], the one
 * threshold that can lie in the slice (0xffff where it lies beyond: no |x| of the slice is
 * above it), so #{T < |x|} = key + ((|x| & 0xffff) > low), without the dependent load of T;
 * the slices that hold several thresholds keep lut's negative entry. For tables of fewer
 * than 2^15 thresholds (the default accuracy needs about 12 000). */
CKZ_API void ckz_key_pack(const int32_t *lut, const float *t, int32_t *pk) {
    for (uint32_t p = 0; p < PREFIXES; p++) {
        int32_t e = lut[p];
        if (e < 0) {
            pk[p] = e;
            continue;
        }
        uint32_t b;
        memcpy(&b, &t[e], sizeof b);
        uint32_t low = (b >> PREFIX_SHIFT) == p ? (b & 0xffffu) : 0xffffu;
        pk[p] = (int32_t)(((uint32_t)e << 16) | low);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* ckz_key_scan's loop eight values at a time over [0, end) (pk given): the keys by one gather
 * of pk, min and max by vector min/max (a NaN never replaces the running value, as in the
 * scalar loop), the counts by eight scalar increments (two histograms, alternate values,
 * measured slower: 1.44-1.71 against 1.34-1.37 ns a value). Stops early (returning where) at a
 * group holding a value whose slice has several thresholds (subnormals): the scalar loop
 * goes on from there. Zeros are counted like other values (key 0), in the same bins. */
__attribute__((target("avx2"))) static int64_t key_scan_avx2(const float *x, int64_t end,
                                                             const int32_t *pk, int64_t row,
                                                             int64_t *hist, float *lo,
                                                             float *hi, uint32_t *bad) {
    __m256 vlo = _mm256_set1_ps(*lo), vhi = _mm256_set1_ps(*hi);
    __m256i vbad = _mm256_setzero_si256();
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), low16 = _mm256_set1_epi32(0xffff);
    const __m256i finite_max = _mm256_set1_epi32(0x7f7fffff), vrow = _mm256_set1_epi32((int)row);
    int32_t idx[8];
    int64_t i = 0;
    for (; i + 8 <= end; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256i b = _mm256_castps_si256(v), mag = _mm256_and_si256(b, abs_mask);
        __m256i e = _mm256_i32gather_epi32(pk, _mm256_srli_epi32(mag, PREFIX_SHIFT), 4);
        if (_mm256_movemask_ps(_mm256_castsi256_ps(e))) break; /* a slice of several */
        vlo = _mm256_min_ps(v, vlo);
        vhi = _mm256_max_ps(v, vhi);
        vbad = _mm256_or_si256(vbad, _mm256_cmpgt_epi32(mag, finite_max));
        __m256i k = _mm256_sub_epi32(
            _mm256_srli_epi32(e, 16),
            _mm256_cmpgt_epi32(_mm256_and_si256(mag, low16), _mm256_and_si256(e, low16)));
        /* row 1 for the values whose sign bit is clear, row 0 for the others */
        __m256i off = _mm256_andnot_si256(_mm256_srai_epi32(b, 31), vrow);
        _mm256_storeu_si256((__m256i *)idx, _mm256_add_epi32(off, k));
        /* two histograms, alternate values: runs of one bin (most values of a tensor fall in
         * a few) then chain two counters, not one */
        for (int j = 0; j < 8; j++) hist[idx[j]]++;
    }
    float l[8], h[8];
    _mm256_storeu_ps(l, vlo);
    _mm256_storeu_ps(h, vhi);
    for (int j = 0; j < 8; j++) {
        *lo = l[j] < *lo ? l[j] : *lo;
        *hi = h[j] > *hi ? h[j] : *hi;
    }
    *bad |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(vbad));
    return i;
}
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* ckz_key_scan's loop sixteen values at a time with AVX-512 over [0, end) (pk and a log fit
 * of the table given): the keys by arithmetic (ckz_logkey16, no gather: on processors whose
 * gathers are slowed by a microcode mitigation a gather costs more than the rest of the
 * loop), zeros as key 0, the lanes it does not settle by the scalar lookup, min and max as
 * the AVX2 loop keeps them, the counts by sixteen scalar increments. The same counts,
 * extremes and flag as the scalar loop. Returns where it stopped (a multiple of 16). */
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"))) static int64_t
key_scan_avx512(const float *x, int64_t end, const int32_t *lut, const float *t,
                const int32_t *pk, const double *fit, int64_t row, int64_t *hist, float *lo,
                float *hi, uint32_t *bad) {
    ckz_logkey k;
    ckz_logkey_open(&k, fit);
    __m512 vlo = _mm512_set1_ps(*lo), vhi = _mm512_set1_ps(*hi);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    const __m512i finite_max = _mm512_set1_epi32(0x7f7fffff), vrow = _mm512_set1_epi32((int)row);
    __mmask16 vbad = 0;
    /* the keys of a group are counted one group later: the scalar loads then read what the
     * vector store wrote long before, not straight after it (a store-forwarding stall) */
    int32_t idx[2][16];
    int64_t i = 0, filled = 0;
    for (; i + 16 <= end; i += 16) {
        int32_t *cur = idx[(i >> 4) & 1], *prev = idx[~(i >> 4) & 1];
        __m512 v = _mm512_loadu_ps(x + i);
        __m512i b = _mm512_castps_si512(v), mag = _mm512_and_si512(b, abs_mask);
        vlo = _mm512_min_ps(v, vlo);
        vhi = _mm512_max_ps(v, vhi);
        vbad |= _mm512_cmpgt_epi32_mask(mag, finite_max);
        __mmask16 fix, zero = _mm512_testn_epi32_mask(mag, mag);
        __m512i key = ckz_logkey16(&k, _mm512_castsi512_ps(mag), &fix);
        key = _mm512_mask_mov_epi32(key, zero, _mm512_setzero_si512());
        fix &= (__mmask16)~zero;
        /* row 1 for the values whose sign bit is clear, row 0 for the others */
        __m512i off = _mm512_maskz_mov_epi32((__mmask16)~_mm512_movepi32_mask(b), vrow);
        _mm512_storeu_si512(cur, _mm512_add_epi32(off, key));
        for (unsigned f = fix; f; f &= f - 1) { /* rare: the scalar lookup */
            int j = __builtin_ctz(f);
            uint32_t bj;
            memcpy(&bj, &x[i + j], sizeof bj);
            uint32_t mj = bj & 0x7fffffffu;
            int32_t e = pk[mj >> PREFIX_SHIFT];
            int32_t kj = e >= 0 ? (e >> 16) + ((int32_t)(mj & 0xffffu) > (e & 0xffff))
                                : ckz_key(lut, t, mj);
            cur[j] = (int32_t)((int64_t)(1u - (bj >> 31)) * row + kj);
        }
        if (filled)
            for (int j = 0; j < 16; j++) hist[prev[j]]++;
        filled = 1;
    }
    if (filled)
        for (int j = 0; j < 16; j++) hist[idx[((i >> 4) - 1) & 1][j]]++;
    *lo = _mm512_reduce_min_ps(vlo) < *lo ? _mm512_reduce_min_ps(vlo) : *lo;
    *hi = _mm512_reduce_max_ps(vhi) > *hi ? _mm512_reduce_max_ps(vhi) : *hi;
    *bad |= (uint32_t)vbad;
    return i;
}
#endif

/* The scalar loop keeps the first of equal extremes it meets, so a zero extreme has the sign
 * of the first zero in order; the vector loop meets them in another order. Where the extreme
 * it found is a zero, the first zero of [0, end) gives its sign. */
static float first_zero_sign(const float *x, int64_t end, float fallback) {
    for (int64_t i = 0; i < end; i++)
        if (x[i] == 0.0f) return x[i];
    return fallback;
}

/* hist: 2 x (len + 1) int64, row 0 the negative values by key, row 1 the others (zeros have
 * key 0: T[0] is 0.0). out: lo, hi (NaN ignored); returns 1 when a NaN or inf was seen.
 * pk: ckz_key_pack's table of lut and t, or NULL (then lut and t alone); fit: ckz_log_fit of
 * t, or NULL. On x86-64 with AVX-512 (pk and fit given) the values go sixteen at a time, keys
 * by arithmetic (CKPTZIP_NO_AVX512=1: the AVX2 loop); with AVX2 (pk given) eight at a time, keys
 * by a gather (CKPTZIP_NO_AVX2=1: the scalar loop). The same counts and extremes each way. */
CKZ_API int32_t ckz_key_scan(const float *x, int64_t n, const int32_t *lut, const float *t,
                             int32_t len, const int32_t *pk, const double *fit, int64_t *hist,
                             float *out) {
    float lo = bits_to_float(0x7f800000u), hi = -lo;
    uint32_t bad = 0;
    int64_t row = (int64_t)len + 1;
    int64_t zeros[2] = {0, 0};
    int64_t i = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (pk != NULL && fit != NULL && ckz_avx512_ok()) {
        i = key_scan_avx512(x, n, lut, t, pk, fit, row, hist, &lo, &hi, &bad);
        if (lo == 0.0f) lo = first_zero_sign(x, i, lo);
        if (hi == 0.0f) hi = first_zero_sign(x, i, hi);
    } else if (pk != NULL && ckz_avx2_ok()) {
        i = key_scan_avx2(x, n, pk, row, hist, &lo, &hi, &bad);
        if (lo == 0.0f) lo = first_zero_sign(x, i, lo);
        if (hi == 0.0f) hi = first_zero_sign(x, i, hi);
    }
#endif
    for (; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        uint32_t mag = b & 0x7fffffffu;
        float v = x[i];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        bad |= mag >= 0x7f800000u;
        if (mag == 0) { /* counted apart: a run of zeros would chain the same counter */
            zeros[b >> 31]++;
            continue;
        }
        int32_t k;
        int32_t e = pk != NULL ? pk[mag >> PREFIX_SHIFT] : -1;
        if (e >= 0)
            k = (e >> 16) + ((int32_t)(mag & 0xffffu) > (e & 0xffff));
        else
            k = ckz_key(lut, t, mag);
        /* the row by the sign bit without a branch: signs are random, a branch mispredicts */
        hist[(int64_t)(1u - (b >> 31)) * row + k]++;
    }
    hist[0] += zeros[1];
    hist[row] += zeros[0];
    out[0] = lo;
    out[1] = hi;
    return bad != 0;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* ckz_members' scan sixteen values at a time with AVX2: both ranges' tests as compares, and
 * the positions of the members (a few in a thousand) taken bit by bit from the masks. The
 * block loop below writes a position for every value of a block that holds a member, and
 * where a bucket holds 0.2-0.3 % of the values (the moments' edges) half the blocks do: 1.2-1.5
 * ns a value there. Returns where it stopped (a multiple of 16); *k0, *k1 the counts. */
__attribute__((target("avx2,bmi"))) static int64_t
members_avx2(const float *x, int64_t n, float l0, float h0, float l1, float h1, int64_t *out0,
             int64_t *out1, int64_t *k0, int64_t *k1) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 vl0 = _mm256_set1_ps(l0), vh0 = _mm256_set1_ps(h0);
    const __m256 vl1 = _mm256_set1_ps(l1), vh1 = _mm256_set1_ps(h1);
    int64_t i = 0, c0 = *k0, c1 = *k1;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), absmask);
        __m256 b = _mm256_and_ps(_mm256_loadu_ps(x + i + 8), absmask);
        uint32_t m0 = (uint32_t)_mm256_movemask_ps(_mm256_and_ps(
                          _mm256_cmp_ps(a, vl0, _CMP_GT_OQ), _mm256_cmp_ps(a, vh0, _CMP_LE_OQ))) |
                      (uint32_t)_mm256_movemask_ps(_mm256_and_ps(
                          _mm256_cmp_ps(b, vl0, _CMP_GT_OQ), _mm256_cmp_ps(b, vh0, _CMP_LE_OQ)))
                          << 8;
        uint32_t m1 = (uint32_t)_mm256_movemask_ps(_mm256_and_ps(
                          _mm256_cmp_ps(a, vl1, _CMP_GT_OQ), _mm256_cmp_ps(a, vh1, _CMP_LE_OQ))) |
                      (uint32_t)_mm256_movemask_ps(_mm256_and_ps(
                          _mm256_cmp_ps(b, vl1, _CMP_GT_OQ), _mm256_cmp_ps(b, vh1, _CMP_LE_OQ)))
                          << 8;
        for (; m0; m0 &= m0 - 1) out0[c0++] = i + __builtin_ctz(m0);
        for (; m1; m1 &= m1 - 1) out1[c1++] = i + __builtin_ctz(m1);
    }
    *k0 = c0;
    *k1 = c1;
    return i;
}
#endif

/* Positions i (ascending) with lo[r] < |x[i]| <= hi[r], for ranges r = 0, 1 (n_ranges of
 * them), into out[r] (each with room for its count + 1); counts written to found[r]. With
 * AVX2 sixteen values at a time (above; CKPTZIP_NO_AVX2=1: the loop below, the same
 * positions); else a block is first tested as a whole (a branch-free OR the compiler
 * vectorises): the two buckets hold a few values in a thousand. */
CKZ_API void ckz_members(const float *x, int64_t n, const float *lo, const float *hi,
                         int32_t n_ranges, int64_t *out0, int64_t *out1, int64_t *found) {
    int64_t k0 = 0, k1 = 0, first = 0;
    float l0 = lo[0], h0 = hi[0];
    float l1 = n_ranges > 1 ? lo[1] : 0.0f, h1 = n_ranges > 1 ? hi[1] : -1.0f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (ckz_avx2_ok()) first = members_avx2(x, n, l0, h0, l1, h1, out0, out1, &k0, &k1);
#endif
    for (int64_t start = first; start < n; start += 256) {
        int64_t stop = start + 256 < n ? start + 256 : n;
        int any = 0;
        for (int64_t i = start; i < stop; i++) {
            float a = fabsf(x[i]);
            any |= ((a > l0) & (a <= h0)) | ((a > l1) & (a <= h1));
        }
        if (!any) continue;
        for (int64_t i = start; i < stop; i++) {
            float a = fabsf(x[i]);
            int in0 = (a > l0) & (a <= h0);
            int in1 = (a > l1) & (a <= h1);
            out0[k0] = i;
            k0 += in0;
            out1[k1] = i;
            k1 += in1;
        }
    }
    found[0] = k0;
    found[1] = k1;
}

/* The level index of every float32 value by a table over its top 16 bits (sign, exponent,
 * 7 mantissa bits): #{cuts < v} is the same for every value of a slice that holds no
 * cut-off, so lut[slice] = o2i[that count]; CKZ_RESOLVE marks the (at most one per cut-off)
 * slices that hold one, and the zero slices where exact zeros have their own index; those
 * values are resolved one by one. Filled slice range by slice range, a cut-off at a time. */
#define CKZ_RESOLVE 255

static uint8_t ckz_resolve_index(float v, const float *cuts, int32_t n_cuts, const uint8_t *o2i,
                                 int32_t zero_fix) {
    int32_t l = 0, h = n_cuts;
    while (l < h) {
        int32_t mid = (l + h) >> 1;
        if (cuts[mid] < v)
            l = mid + 1;
        else
            h = mid;
    }
    if (zero_fix >= 0 && v == 0.0f) return (uint8_t)zero_fix;
    return o2i[l];
}

static inline uint32_t ckz_slice(float c) { /* the magnitude slice of a value */
    uint32_t b;
    memcpy(&b, &c, sizeof b);
    return (b & 0x7fffffffu) >> 16;
}

static void ckz_level_table(const float *cuts, int32_t n_cuts, const uint8_t *o2i,
                            int32_t zero_fix, uint8_t *lut) {
    /* non-negative values: slices ascend with the value; j = #{cuts < the slice's lowest} */
    int32_t j = 0;
    while (j < n_cuts && cuts[j] < 0.0f) j++;
    uint32_t p = 0;
    while (p < 32768u) {
        if (j == n_cuts) {
            memset(lut + p, o2i[j], 32768u - p);
            break;
        }
        uint32_t q = ckz_slice(cuts[j]); /* cuts[j] >= the slice's lowest value */
        if (q > p) memset(lut + p, o2i[j], q - p);
        lut[q] = CKZ_RESOLVE;
        while (j < n_cuts && ckz_slice(cuts[j]) <= q) j++;
        p = q + 1;
    }
    /* negative values: slices descend with the value; j = #{cuts < -(the slice's lowest)} */
    uint8_t *neg = lut + 32768;
    j = 0;
    while (j < n_cuts && cuts[j] < 0.0f) j++;
    p = 0;
    while (p < 32768u) {
        if (j == 0) {
            memset(neg + p, o2i[0], 32768u - p);
            break;
        }
        uint32_t q = ckz_slice(cuts[j - 1]); /* the largest cut below the slice, < 0 */
        if (q > p) memset(neg + p, o2i[j], q - p);
        neg[q] = CKZ_RESOLVE;
        while (j > 0 && ckz_slice(cuts[j - 1]) <= q) j--;
        p = q + 1;
    }
    if (zero_fix >= 0) lut[0] = neg[0] = CKZ_RESOLVE;
}

/* The level index of every value, the protect / prune decisions and the measured error.
 *
 * Index: o2i[#{cuts < x}] (zero_fix for x = 0 when >= 0), by the slice table above.
 * Protected: |x| > pt, or |x| == pt and i <= pp; their positions go to prot (ascending; room
 * for max_prot) and they add nothing to the error. Pruned (not protected): |x| < qt, or
 * |x| == qt and i <= qp: index qidx. err[0] = sum of (levels[idx] - x)^2 over the others
 * (difference in float32, sum in double), err[1] = sum of x^2 over all. Returns the number
 * of protected positions, -1 when there were more than max_prot, -2 without memory. */
typedef struct {
    const float *x;
    const float *cuts;
    int32_t n_cuts;
    const uint8_t *o2i;
    int32_t zero_fix;
    float pt, qt;
    int64_t pp, qp;
    uint8_t qidx;
    const float *levels;
    const uint8_t *lut;
    uint8_t *out;
    int64_t *prot;
    int64_t max_prot, np;
} ckz_assign_ctx;

/* One value: its index, the two rules, its share of the sums. 0, or -1 when there are more
 * protected positions than counted. The AVX2 path below runs this for every group of 8
 * values it does not settle itself, so both paths write the same indices and positions. */
static inline int ckz_assign_one(ckz_assign_ctx *c, int64_t i, double *e, double *m) {
    uint32_t b;
    float v = c->x[i];
    memcpy(&b, &v, sizeof b);
    uint8_t k = c->lut[b >> 16];
    if (k == CKZ_RESOLVE) k = ckz_resolve_index(v, c->cuts, c->n_cuts, c->o2i, c->zero_fix);
    float a = bits_to_float(b & 0x7fffffffu);
    *m += (double)v * (double)v;
    if (a > c->pt || (a == c->pt && i <= c->pp)) {
        if (c->np >= c->max_prot) return -1;
        c->prot[c->np++] = i;
        c->out[i] = k;
        return 0;
    }
    int pruned = (a < c->qt) | ((a == c->qt) & (i <= c->qp)); /* no branch: prune 30 % */
    k = pruned ? c->qidx : k;
    c->out[i] = k;
    float d = c->levels[k] - v;
    *e += (double)d * (double)d;
    return 0;
}

/* Elements [lo, hi): four sums each, element i into sum i % 4 (one chain of additions would
 * bound the loop by the adder's latency; the recorded error is rounded to 8 digits, so the
 * order of the sums cannot change a file). */
static int ckz_assign_scalar(ckz_assign_ctx *c, int64_t lo, int64_t hi, double *err) {
    double e[4] = {0.0, 0.0, 0.0, 0.0}, m[4] = {0.0, 0.0, 0.0, 0.0};
    for (int64_t i = lo; i < hi; i++)
        if (ckz_assign_one(c, i, &e[i & 3], &m[i & 3])) return -1;
    err[0] += (e[0] + e[1]) + (e[2] + e[3]);
    err[1] += (m[0] + m[1]) + (m[2] + m[3]);
    return 0;
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define CKZ_HAVE_AVX2_PATH 1
/* Eight values at a time: the slice table and the level values gathered, the prune rule a
 * blend, the sums in double lanes (products and sums as separate instructions, no fused
 * multiply-add, as the scalar code). A group holding a value the vector code does not settle
 * (a slice to resolve, a protect candidate |x| >= pt, a tie |x| == qt) goes to
 * ckz_assign_one value by value. */
__attribute__((target("avx2"))) static int ckz_assign_avx2(ckz_assign_ctx *c, int64_t lo,
                                                           int64_t hi, double *err) {
    const __m256i byte = _mm256_set1_epi32(0xff), resolve = _mm256_set1_epi32(CKZ_RESOLVE);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 vpt = _mm256_set1_ps(c->pt), vqt = _mm256_set1_ps(c->qt);
    const __m256i vq = _mm256_set1_epi32(c->qidx);
    /* a slice to resolve: #{cuts < v} counted in the lanes, for up to 32 cut-offs */
    uint8_t o2i[256 + 4] = {0};
    memcpy(o2i, c->o2i, (size_t)c->n_cuts + 1);
    const int lanes_resolve = c->n_cuts <= 32;
    const __m256i vzero_fix = _mm256_set1_epi32(c->zero_fix);
    __m256d e0 = _mm256_setzero_pd(), e1 = e0, m0 = e0, m1 = e0;
    double es[4] = {0.0, 0.0, 0.0, 0.0}, ms[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 v = _mm256_loadu_ps(c->x + i);
        __m256i slice = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
        __m256i k = _mm256_and_si256(
            _mm256_i32gather_epi32((const int *)c->lut, slice, 1), byte); /* lut: 3 spare */
        __m256 a = _mm256_and_ps(v, absmask);
        __m256 odd = _mm256_or_ps(_mm256_cmp_ps(a, vpt, _CMP_GE_OQ),
                                  _mm256_cmp_ps(a, vqt, _CMP_EQ_OQ));
        __m256i res = _mm256_cmpeq_epi32(k, resolve);
        int any = _mm256_movemask_ps(odd);
        if (_mm256_movemask_epi8(res)) {
            if (lanes_resolve) {
                __m256i cnt = _mm256_setzero_si256();
                for (int32_t j = 0; j < c->n_cuts; j++) /* a true compare is -1 */
                    cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(_mm256_cmp_ps(
                                                    _mm256_set1_ps(c->cuts[j]), v, _CMP_LT_OQ)));
                __m256i kr =
                    _mm256_and_si256(_mm256_i32gather_epi32((const int *)o2i, cnt, 1), byte);
                if (c->zero_fix >= 0) {
                    __m256 zero = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_EQ_OQ);
                    kr = _mm256_blendv_epi8(kr, vzero_fix, _mm256_castps_si256(zero));
                }
                k = _mm256_blendv_epi8(k, kr, res);
            } else {
                any = 1;
            }
        }
        if (any) {
            for (int64_t j = i; j < i + 8; j++)
                if (ckz_assign_one(c, j, &es[j & 3], &ms[j & 3])) return -1;
            continue;
        }
        k = _mm256_blendv_epi8(k, vq, _mm256_castps_si256(_mm256_cmp_ps(a, vqt, _CMP_LT_OQ)));
        __m128i k16 = _mm_packus_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
        _mm_storel_epi64((__m128i *)(c->out + i), _mm_packus_epi16(k16, k16));
        __m256 d = _mm256_sub_ps(_mm256_i32gather_ps(c->levels, k, 4), v);
        __m256d dl = _mm256_cvtps_pd(_mm256_castps256_ps128(d));
        __m256d dh = _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1));
        e0 = _mm256_add_pd(e0, _mm256_mul_pd(dl, dl));
        e1 = _mm256_add_pd(e1, _mm256_mul_pd(dh, dh));
        __m256d vl = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d vh = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        m0 = _mm256_add_pd(m0, _mm256_mul_pd(vl, vl));
        m1 = _mm256_add_pd(m1, _mm256_mul_pd(vh, vh));
    }
    for (; i < hi; i++)
        if (ckz_assign_one(c, i, &es[i & 3], &ms[i & 3])) return -1;
    double ev[4], mv[4];
    _mm256_storeu_pd(ev, _mm256_add_pd(e0, e1));
    _mm256_storeu_pd(mv, _mm256_add_pd(m0, m1));
    err[0] += ((ev[0] + ev[1]) + (ev[2] + ev[3])) + ((es[0] + es[1]) + (es[2] + es[3]));
    err[1] += ((mv[0] + mv[1]) + (mv[2] + mv[3])) + ((ms[0] + ms[1]) + (ms[2] + ms[3]));
    return 0;
}

/* Sixteen values at a time with AVX-512 where the codebook's indices are below 32 (the
 * default weights' 32 levels, the moments' 8 and 4): #{cuts < v} by a branch-free binary
 * search over the cut-offs held in two registers (+inf past the last), the index and the
 * level by register permutes (vpermi2d, vpermi2ps), no gathers: where the processor carries
 * the gather data sampling mitigation (Intel up to Ice Lake, as shipped by clouds) one
 * eight-lane gather costs about 24 cycles, and the AVX2 loop takes two of them per eight
 * values. The same compares as the reference's search, so the same indices; the prune rule's
 * ties (|x| == qt) are settled in the lanes by position; a group holding a protect candidate
 * (|x| >= pt) or a NaN goes to ckz_assign_one value by value. */
static int ckz_assign_fits_512(const ckz_assign_ctx *c) {
    if (c->n_cuts > 31 || c->zero_fix >= 32 || (c->qt >= 0.0f && c->qidx >= 32)) return 0;
    for (int32_t j = 0; j <= c->n_cuts; j++)
        if (c->o2i[j] >= 32) return 0;
    return 1;
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static int
ckz_assign_avx512(ckz_assign_ctx *c, int64_t lo, int64_t hi, double *err) {
    float cut[32], lev[32];
    int32_t o2[32] = {0};
    for (int j = 0; j < 32; j++) {
        cut[j] = j < c->n_cuts ? c->cuts[j] : INFINITY;
        lev[j] = c->levels[j]; /* the caller's table holds 256 */
    }
    for (int32_t j = 0; j <= c->n_cuts; j++) o2[j] = c->o2i[j];
    const __m512 c0 = _mm512_loadu_ps(cut), c1 = _mm512_loadu_ps(cut + 16);
    const __m512 l0 = _mm512_loadu_ps(lev), l1 = _mm512_loadu_ps(lev + 16);
    const __m512i o0 = _mm512_loadu_si512((const void *)o2);
    const __m512i o1 = _mm512_loadu_si512((const void *)(o2 + 16));
    int32_t top = ckz_search_top(c->n_cuts);
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512 vpt = _mm512_set1_ps(c->pt), vqt = _mm512_set1_ps(c->qt);
    const __m512i vq = _mm512_set1_epi32(c->qidx), vzf = _mm512_set1_epi32(c->zero_fix);
    __m512d e0 = _mm512_setzero_pd(), e1 = e0, m0 = e0, m1 = e0;
    double es[4] = {0.0, 0.0, 0.0, 0.0}, ms[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m512 v = _mm512_loadu_ps(c->x + i);
        __m512 a = _mm512_and_ps(v, absmask);
        if (_mm512_cmp_ps_mask(a, vpt, _CMP_GE_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) {
            for (int64_t j = i; j < i + 16; j++)
                if (ckz_assign_one(c, j, &es[j & 3], &ms[j & 3])) return -1;
            continue;
        }
        __m512i cnt = ckz_count_below16(c0, c1, top, v); /* #{cuts < v} */
        __m512i k = _mm512_permutex2var_epi32(o0, cnt, o1);
        if (c->zero_fix >= 0)
            k = _mm512_mask_mov_epi32(k, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_EQ_OQ),
                                      vzf);
        __mmask16 pruned = _mm512_cmp_ps_mask(a, vqt, _CMP_LT_OQ);
        __mmask16 tie = _mm512_cmp_ps_mask(a, vqt, _CMP_EQ_OQ);
        if (tie) { /* lanes at positions <= qp */
            int64_t r = c->qp - i;
            pruned |= tie & (r < 0 ? 0 : r >= 15 ? 0xffff : (__mmask16)((1u << (r + 1)) - 1));
        }
        k = _mm512_mask_mov_epi32(k, pruned, vq);
        _mm_storeu_si128((__m128i *)(c->out + i), _mm512_cvtepi32_epi8(k));
        __m512 d = _mm512_sub_ps(_mm512_permutex2var_ps(l0, k, l1), v);
        __m512d dl = _mm512_cvtps_pd(_mm512_castps512_ps256(d));
        __m512d dh = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
        e0 = _mm512_add_pd(e0, _mm512_mul_pd(dl, dl));
        e1 = _mm512_add_pd(e1, _mm512_mul_pd(dh, dh));
        __m512d vl = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d vh = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        m0 = _mm512_add_pd(m0, _mm512_mul_pd(vl, vl));
        m1 = _mm512_add_pd(m1, _mm512_mul_pd(vh, vh));
    }
    for (; i < hi; i++)
        if (ckz_assign_one(c, i, &es[i & 3], &ms[i & 3])) return -1;
    err[0] += _mm512_reduce_add_pd(_mm512_add_pd(e0, e1)) + ((es[0] + es[1]) + (es[2] + es[3]));
    err[1] += _mm512_reduce_add_pd(_mm512_add_pd(m0, m1)) + ((ms[0] + ms[1]) + (ms[2] + ms[3]));
    return 0;
}
#endif

CKZ_API int64_t ckz_assign_fused(const float *x, int64_t n, const float *cuts, int32_t n_cuts,
                                 const uint8_t *o2i, int32_t zero_fix, float pt, int64_t pp,
                                 float qt, int64_t qp, int32_t qidx, const float *levels,
                                 uint8_t *out, int64_t *prot, int64_t max_prot, double *err) {
    uint8_t *lut = (uint8_t *)calloc(65536 + 4, 1); /* + 4: the 32-bit gathers read past */
    if (lut == NULL) return -2;
    ckz_level_table(cuts, n_cuts, o2i, zero_fix, lut);
    ckz_assign_ctx c = {x,  cuts,   n_cuts, o2i, zero_fix, pt,  qt,       pp,
                        qp, (uint8_t)qidx, levels, lut, out, prot, max_prot, 0};
    int (*pass)(ckz_assign_ctx *, int64_t, int64_t, double *) = ckz_assign_scalar;
#ifdef CKZ_HAVE_AVX2_PATH
    if (ckz_avx2_ok()) /* CKPTZIP_NO_AVX512: the AVX2 loop; CKPTZIP_NO_AVX2: the scalar one */
        pass = ckz_avx512_ok() && ckz_assign_fits_512(&c) ? ckz_assign_avx512 : ckz_assign_avx2;
#endif
    double sums[2] = {0.0, 0.0};
    for (int64_t lo = 0; lo < n; lo += 4096) {
        int64_t hi = lo + 4096 < n ? lo + 4096 : n;
        double block[2] = {0.0, 0.0};
        if (pass(&c, lo, hi, block)) {
            free(lut);
            return -1;
        }
        sums[0] += block[0];
        sums[1] += block[1];
    }
    free(lut);
    err[0] = sums[0];
    err[1] = sums[1];
    return c.np;
}

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native",
    "ckptzip's compiled kernels (loaded through ctypes; see ckptzip.kernels).", -1, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
