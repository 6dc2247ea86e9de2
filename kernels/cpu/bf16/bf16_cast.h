/* float32 <-> bfloat16 casts over n elements (bf16 as uint16 bit patterns), on OpenMP
 * threads; float32 -> bfloat16 rounds to nearest even (bf16_bits.h).  No bf16 instructions:
 * these run on every CPU (the storage path). */
void nl_f32_to_bf16(const float *src, uint16_t *dst, int64_t n);
void nl_bf16_to_f32(const uint16_t *src, float *dst, int64_t n);
