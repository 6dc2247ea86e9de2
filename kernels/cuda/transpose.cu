// Batched 2-D transpose: out (Bt, C, R) = in (Bt, R, C) swapped in its last two axes, through a
// 32 x 33 shared tile (coalesced reads and writes, no bank conflicts).  Blocks of 32 x 8
// threads; grid (ceil(C / 32), ceil(R / 32), Bt).  Elements are copied as raw bits of 4 bytes
// (NL_B32) or 2 bytes (NL_B16).
#include "neonlite_common.cuh"

#define NL_TILE 32
#define NL_ROWS 8

template <class T>
__device__ void nl_transpose_impl(T* out, const T* in, int R, int C) {
    __shared__ T tile[NL_TILE][NL_TILE + 1];
    const long long plane = (long long)R * C * blockIdx.z;
    int c = blockIdx.x * NL_TILE + threadIdx.x;
    for (int k = threadIdx.y; k < NL_TILE; k += NL_ROWS) {
        int r = blockIdx.y * NL_TILE + k;
        if (r < R && c < C) tile[k][threadIdx.x] = in[plane + (long long)r * C + c];
    }
    __syncthreads();
    int r = blockIdx.y * NL_TILE + threadIdx.x;
    for (int k = threadIdx.y; k < NL_TILE; k += NL_ROWS) {
        int cc = blockIdx.x * NL_TILE + k;
        if (cc < C && r < R) out[plane + (long long)cc * R + r] = tile[threadIdx.x][k];
    }
}

extern "C" __global__ void nl_transpose_b32(unsigned int* out, const unsigned int* in, int R,
                                            int C) {
    nl_transpose_impl<unsigned int>(out, in, R, C);
}

extern "C" __global__ void nl_transpose_b16(nl_u16* out, const nl_u16* in, int R, int C) {
    nl_transpose_impl<nl_u16>(out, in, R, C);
}
