/* The count of cut-offs below a value, sixteen values at a time with AVX-512: shared by
 * _native.c's fused assignment and _delta.c's requantization.
 *
 * Up to 31 ascending float32 cut-offs sit in two registers (c0: cut[0..15], c1: cut[16..31],
 * padded with +inf); #{cut < x} is found by a branch-free binary search: from the largest
 * power of two `top` at most the number of cut-offs (ckz_search_top), step h adds h where
 * cut[cnt + h - 1] < x. A NaN is below no cut-off (count 0), as the scalar loops count it.
 */
#ifndef CKZ_SEARCH_H
#define CKZ_SEARCH_H

#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* The first step of the search over n cut-offs: the largest power of two <= n (its steps
 * reach 2 top - 1 >= n); 0 for none. */
static inline int32_t ckz_search_top(int32_t n) {
    int32_t top = n > 0 ? 1 : 0;
    while (top && top * 2 <= n) top *= 2;
    return top;
}

__attribute__((target("avx512f"), always_inline)) static inline __m512i
ckz_count_below16(__m512 c0, __m512 c1, int32_t top, __m512 x) {
    __m512i cnt = _mm512_setzero_si512();
    for (int32_t h = top; h; h >>= 1) {
        __m512 probe =
            _mm512_permutex2var_ps(c0, _mm512_add_epi32(cnt, _mm512_set1_epi32(h - 1)), c1);
        cnt = _mm512_mask_add_epi32(cnt, _mm512_cmp_ps_mask(probe, x, _CMP_LT_OQ), cnt,
                                    _mm512_set1_epi32(h));
    }
    return cnt;
}
#endif

#endif
