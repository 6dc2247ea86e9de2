/* Augmentation of batches of uint8 images (H, W, C), one call per batch: the C form of the
 * numpy definitions in neonlite/data/augment/ (geometry.py, resample.py, colour.py), bit for
 * bit.  Compiled once, as the uint8 variant augment_u8 (`real` is uint8_t).
 *
 * Sample i is read from src[i], of src_hw[2i] x src_hw[2i+1] pixels, and written to dst[i] of
 * dst_hw[2i] x dst_hw[2i+1] pixels, both C-contiguous (H, W, channels).  The output is uint8
 * (out_kind 0), or float (1) or double (2) with value x * scale[c] + shift[c] (scale and shift
 * given as doubles, rounded to the output type first): the normalisation fused into the
 * last step.  Samples run in parallel (OpenMP); a sample's result does not depend on the
 * thread count.  Each function returns the number of samples it could not allocate its row
 * buffers for (0: all written). */

/* The widest `simd` level of aug_resize this build holds (0, 1 or 2: what the compiler
 * enabled). */
int aug_simd_built(void);

/* Sample i's window of the image padded with `fill` on every side: output pixel (y, x) is
 * source pixel (top[i] + y, left[i] + x') with x' = W_out - 1 - x when flip[i], else x,
 * and `fill` where that lies outside the source. */
int aug_crop(const real *const *src, const int32_t *src_hw, void *const *dst,
              const int32_t *dst_hw, int64_t n, int channels, const int32_t *top,
              const int32_t *left, const uint8_t *flip, int fill, int out_kind,
              const double *scale, const double *shift);

/* Sample i's box (box[4i..4i+3]: top, left, height, width) resized bilinearly (resample.py,
 * its tap tables made here for each sample: augment_tables.h), mirrored left-right when
 * flip[i]: the horizontal pass into uint8 rows, then the vertical pass; 22-bit fixed point.
 * simd: the vector passes the CPU runs (0: none, the scalar passes; 1: AVX2; 2: AVX-512
 * F/BW/VL/VBMI), each used only where the compiler built it; every choice gives the same
 * bits. */
int aug_resize(const real *const *src, const int32_t *src_hw, void *const *dst,
                const int32_t *dst_hw, int64_t n, int channels, const int32_t *box,
                const uint8_t *flip, int out_kind, const double *scale, const double *shift,
                int simd);

/* Brightness, contrast and saturation factors[3i..3i+2] of sample i (colour.py's ColorJitter,
 * each step in float and rounded half to even back to uint8; a factor of 1 skips its
 * step); dst has the source's size. */
int aug_jitter(const real *const *src, const int32_t *src_hw, void *const *dst, int64_t n,
                int channels, const float *factors, int out_kind, const double *scale,
                const double *shift);
