/* Included first by the kernels whose loops select between two computed values (an erf or
 * exp by range, a clamp, NaN passed through): lets GCC evaluate both sides in vector registers
 * and blend them.  GCC's default -ftrapping-math forbids evaluating a floating-point operation
 * the scalar code would skip (it might raise an exception flag the program could test), and
 * without AVX-512's masked arithmetic that kept every such loop scalar: on an AVX2 CPU (AMD
 * Zen 3) the erf-form GELU ran 5x slower than PyTorch's.  No kernel reads or traps on the
 * exception flags, and the option changes no computed value.  Before the other includes, so
 * their inline math is compiled the same way (GCC does not inline across different
 * optimization options).  AVX-512 targets vectorize these loops with masks already and are
 * compiled as before; clang assumes no traps by default. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__AVX512F__)
#pragma GCC optimize("no-trapping-math")
#endif
