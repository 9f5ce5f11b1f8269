/* ckz_div_apply (the ANS encoders' division by a symbol's width, _ans.h) against the
 * processor's division: every divisor below 2^16 at the dividends where a quotient changes
 * and at the top of the range, divisors around every power of two up to 2^31, and random
 * divisors below 2^32 with random dividends of every size. Prints the count checked and
 * the count wrong; exits 1 on any wrong quotient. Built and run by tests/test_kernels.py. */
#include <stdint.h>
#include <stdio.h>

#include "_ans.h"

static uint64_t state = 88172645463325252ULL;
static uint64_t next(void) { /* xorshift64 */
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

static uint64_t checked = 0, wrong = 0;
static void check(uint64_t x, uint64_t d, ckz_div v) {
    checked++;
    wrong += ckz_div_apply(x, v) != x / d;
}

int main(void) {
    for (uint64_t d = 2; d < (1u << 16); d++) {
        ckz_div v = ckz_div_prepare(d);
        uint64_t top = (~0ULL / d) * d;
        uint64_t xs[] = {0, 1, d - 1, d, d + 1, ~0ULL, ~0ULL - 1, top, top - 1, next()};
        for (int i = 0; i < 10; i++) check(xs[i], d, v);
    }
    for (uint32_t k = 1; k < 32; k++) {
        uint64_t ds[] = {1ULL << k, (1ULL << k) + 1, (1ULL << k) - 1};
        for (int j = 0; j < 3; j++) {
            if (ds[j] < 2) continue;
            ckz_div v = ckz_div_prepare(ds[j]);
            for (int t = 0; t < 20000; t++) check(next() >> (t % 64), ds[j], v);
        }
    }
    for (int t = 0; t < 2000000; t++) {
        uint64_t d = next() >> (32 + next() % 31);
        if (d < 2) continue;
        ckz_div v = ckz_div_prepare(d);
        check(next() >> (next() % 64), d, v);
        check(~0ULL - next() % 1000, d, v);
    }
    printf("%llu %llu\n", (unsigned long long)checked, (unsigned long long)wrong);
    return wrong != 0;
}
