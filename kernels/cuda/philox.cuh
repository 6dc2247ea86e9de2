// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) on one
// counter: the generator of philox.cu's draws and of the fused attention's dropout
// (flash_attention.cu); backends/philox.py is its numpy reference, bit for bit.
#pragma once

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

__device__ __forceinline__ void nl_philox_round(unsigned int c[4], const unsigned int k[2]) {
    unsigned int hi0 = __umulhi(PHILOX_M0, c[0]), lo0 = PHILOX_M0 * c[0];
    unsigned int hi1 = __umulhi(PHILOX_M1, c[2]), lo1 = PHILOX_M1 * c[2];
    unsigned int r0 = hi1 ^ c[1] ^ k[0], r2 = hi0 ^ c[3] ^ k[1];
    c[0] = r0; c[1] = lo1; c[2] = r2; c[3] = lo0;
}

// Philox4x32 with 10 rounds, in place on counter c, key k (k is not modified).
__device__ __forceinline__ void nl_philox4x32_10(unsigned int c[4], const unsigned int key[2]) {
    unsigned int k[2] = {key[0], key[1]};
    for (int round = 0; round < 10; ++round) {
        if (round) { k[0] += PHILOX_W0; k[1] += PHILOX_W1; }
        nl_philox_round(c, k);
    }
}
