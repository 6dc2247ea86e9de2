/* The elementwise math of the fused attention kernels (flash_attention_tiles.h includes this
 * file after its vector types; it is not a cffi header): 2^x of a real (FA_EXP2) and of a
 * vector (fa_vexp2), and the row sums D = rowsum(dO * O) of the backward pass (fa_dot,
 * fa_rowsums). */
#ifndef NEONLITE_FLASH_ATTENTION_MATH_H
#define NEONLITE_FLASH_ATTENTION_MATH_H

/* 2^x for the exponents of the online softmax (x <= 0 up to rounding, or -inf; any x <= 127):
 * for float a straight-line form the compiler vectorizes, 0 below -126, else 2^n times a
 * degree-5 minimax polynomial of the fraction f = x - n in [-1/2, 1/2] with constant term 1
 * (relative error 9e-8, 1.7e-7 evaluated in float; 2^0 is exactly 1, so a running maximum
 * that does not move gives alpha = 1 and the output rows are not rescaled).  n comes from
 * adding and taking off 1.5 * 2^23, which rounds x to the nearest integer and leaves n in the
 * low bits of the sum: shifted into the exponent field they make 2^n without a conversion.
 * Double uses libm.  The kernels work in base 2: scores are scaled by scale * log2(e), and lse
 * converted back to base e. */
/* fa_exp2f's polynomial in f, Horner's steps madd(p, f, c) on constants k(c): one list of
 * coefficients for the scalar form and the vector forms below */
#define FA_MADD(a, b, c) ((a) * (b) + (c))
#define FA_SAME(c) (c)
#define FA_EXP2_POLY(madd, k, f)                                                               \
    madd(madd(madd(madd(madd(k(1.3264713343232870e-3f), f, k(9.6715074032545090e-3f)), f,       \
                        k(5.5507335811853409e-2f)),                                             \
                   f, k(2.4022242426872253e-1f)),                                               \
              f, k(6.9314700365066528e-1f)),                                                    \
         f, k(1.0f))
static inline float fa_exp2f(float x)
{
    const float magic = 12582912.0f;
    const float y = x + magic, n = y - magic, f = x - n;
    const float p = FA_EXP2_POLY(FA_MADD, FA_SAME, f);
    union { float f; uint32_t u; } s = {y};
    s.u = (s.u << 23) + (127u << 23);
    return x < -126.0f ? 0.0f : p * s.f;
}
#define FA_EXP2(x) _Generic((x), float: fa_exp2f, default: exp2)(x)

/* FA_EXP2 of each lane.  With AVX-512 and float the same steps as fa_exp2f in fewer
 * instructions (same results): the rounding by vrndscaleps, the scaling by 2^n by vscalefps,
 * masked to 0 below -126; with AVX2 and FMA (no AVX-512) and float fa_exp2f's own steps on
 * eight lanes at once; otherwise FA_EXP2 lane by lane. */
static inline fa_vec fa_vexp2(fa_vec x)
{
#if FA_FLOAT && defined(__AVX512F__)
    const __m512 v = (__m512)x;
    const __m512 n = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(v, n);
    const __m512 p = FA_EXP2_POLY(_mm512_fmadd_ps, _mm512_set1_ps, f);
    /* lanes at or above -126, and NaN lanes, keep their value */
    const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    return (fa_vec)_mm512_maskz_scalef_ps(keep, p, n);
#elif FA_FLOAT && defined(__AVX2__) && defined(__FMA__)
    const __m256 v = (__m256)x, magic = _mm256_set1_ps(12582912.0f);
    const __m256 y = _mm256_add_ps(v, magic), f = _mm256_sub_ps(v, _mm256_sub_ps(y, magic));
    const __m256 p = FA_EXP2_POLY(_mm256_fmadd_ps, _mm256_set1_ps, f);
    /* 2^n from n in the low bits of y, as fa_exp2f makes it */
    const __m256i bits = _mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(y), 23),
                                          _mm256_set1_epi32(127 << 23));
    const __m256 low = _mm256_cmp_ps(v, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);
    return (fa_vec)_mm256_andnot_ps(low, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
#else
    fa_vec y;
    for (int64_t l = 0; l < FA_W; l++)
        y[l] = FA_EXP2(x[l]);
    return y;
#endif
}
#define FA_LOG2E 1.4426950408889634
#define FA_LN2 0.6931471805599453

/* The sum of a[d] b[d] over d < n in double: eight partial sums (over d mod 8) added in a
 * fixed tree, then the terms past the last 8. */
typedef double fa_dvec8 __attribute__((vector_size(64)));
typedef real fa_rvec8 __attribute__((vector_size(8 * sizeof(real)), aligned(sizeof(real)),
                                     may_alias));
static inline double fa_dot(const real *a, const real *b, int64_t n)
{
    fa_dvec8 acc = {0};
    int64_t d = 0;
    for (; d + 8 <= n; d += 8)
        acc += __builtin_convertvector(*(const fa_rvec8 *)(a + d), fa_dvec8) *
               __builtin_convertvector(*(const fa_rvec8 *)(b + d), fa_dvec8);
    double s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (; d < n; d++)
        s += (double)a[d] * (double)b[d];
    return s;
}

#if FA_FLOAT && defined(__AVX512F__)
/* The eight partial sums acc[r] of rows r = 0 .. 7 added in fa_dot's tree, eight rows at once:
 * lanes (l, l + 4), then (l, l + 2), then (l, l + 1); the row sums in order. */
static inline __m512d fa_tree8(const __m512d acc[8])
{
    __m512d s[4], u[2];
    for (int k = 0; k < 4; k++) /* rows 2k | 2k + 1: a_l + a_(l+4), l < 4 */
        s[k] = _mm512_add_pd(_mm512_shuffle_f64x2(acc[2 * k], acc[2 * k + 1], 0x44),
                             _mm512_shuffle_f64x2(acc[2 * k], acc[2 * k + 1], 0xEE));
    for (int k = 0; k < 2; k++) /* rows 4k .. 4k + 3: b_0 + b_2, b_1 + b_3 */
        u[k] = _mm512_add_pd(_mm512_shuffle_f64x2(s[2 * k], s[2 * k + 1], 0x88),
                             _mm512_shuffle_f64x2(s[2 * k], s[2 * k + 1], 0xDD));
    /* c_0 + c_1 of rows 0 4 1 5 2 6 3 7, then in order */
    const __m512d t = _mm512_add_pd(_mm512_unpacklo_pd(u[0], u[1]), _mm512_unpackhi_pd(u[0], u[1]));
    return _mm512_permutexvar_pd(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), t);
}
#endif

/* D (Tq) = rowsum(dO * O) of a slice's rows (in double, fa_dot's sums), o and dout at row
 * strides lo, ldo; with AVX-512 and float eight rows at a time. */
static void fa_rowsums(const real *o, int64_t lo, const real *dout, int64_t ldo, int64_t Tq,
                       int64_t dv, real *D)
{
    int64_t i = 0;
#if FA_FLOAT && defined(__AVX512F__)
    const int64_t dw = dv - dv % 8;
    for (; i + 8 <= Tq; i += 8) {
        __m512d acc[8];
        for (int r = 0; r < 8; r++) {
            const real *a = o + (i + r) * lo, *b = dout + (i + r) * ldo;
            acc[r] = _mm512_setzero_pd();
            for (int64_t d = 0; d < dw; d += 8)
                acc[r] = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(a + d)),
                                         _mm512_cvtps_pd(_mm256_loadu_ps(b + d)), acc[r]);
        }
        double sums[8];
        _mm512_storeu_pd(sums, fa_tree8(acc));
        for (int r = 0; r < 8; r++) {
            const real *a = o + (i + r) * lo, *b = dout + (i + r) * ldo;
            for (int64_t d = dw; d < dv; d++)
                sums[r] += (double)a[d] * (double)b[d];
            D[i + r] = (real)sums[r];
        }
    }
#endif
    for (; i < Tq; i++)
        D[i] = (real)fa_dot(o + i * lo, dout + i * ldo, dv);
}

#endif
