/* The AMX tile instructions that gemm_bf16_amx.h uses, done in C: the gemm_bf16_amx_emulated
 * variant (-DNL_AMX_EMULATED) runs the AMX kernel's own code (its tile configuration, packing,
 * tile loads and stores, and the epilogue) on a CPU without AMX, so its tests run on every
 * machine.  The backend never chooses it: it is for tests, and as slow as it is plain.
 *
 * Each thread has its own eight tiles and configuration (the state the hardware keeps per
 * thread).  What the instructions compute, after Intel's pseudocode (SDM, TDPBF16PS):
 *
 *   loadconfig: palette 1; tile t holds rows[t] rows of colsb[t] bytes (at most 16 x 64);
 *               every tile is zeroed;
 *   loadd t, base, stride: row r of t = the colsb[t] bytes at base + r * stride; the rest of
 *               the tile (rows and bytes past the configured ones) is zero;
 *   stored t, base, stride: row r of t (colsb[t] bytes) to base + r * stride;
 *   dpbf16ps c, a, b: for each row m of c, pair k of a's row (a.colsb / 4 pairs, b's rows) and
 *               float32 column n of c: c[m][n] += a[m].bf16[2k] * b[k].bf16[2n], then
 *               c[m][n] += a[m].bf16[2k + 1] * b[k].bf16[2n + 1], each step rounded to
 *               float32 (nearest even: a product of two bf16 values is exact), denormal
 *               inputs read as zero and denormal results flushed to zero.
 *
 * A use the hardware would fault on (a tile instruction before a configuration, a palette
 * other than 1, a shape past 16 x 64, a dot product whose shapes do not match: a.colsb / 4 !=
 * b.rows, c.colsb != b.colsb or c.rows != a.rows) stops the process as the fault would, with
 * a message on stderr that names the instruction and the shapes.
 */
#ifndef NEONLITE_AMX_EMULATED_H
#define NEONLITE_AMX_EMULATED_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NL_EMU_TILES 8
#define NL_EMU_ROWS 16
#define NL_EMU_COLSB 64

typedef struct {
    int configured;
    uint8_t rows[NL_EMU_TILES];
    uint16_t colsb[NL_EMU_TILES];
    float data[NL_EMU_TILES][NL_EMU_ROWS][NL_EMU_COLSB / 4];
} nl_emu_tiles;

/* this thread's tiles */
static _Thread_local nl_emu_tiles nl_emu;

/* the configuration's layout (64 bytes), as LDTILECFG reads it */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} nl_emu_config;

/* the fault of instruction `what` (tiles c, a, b; -1 where not an operand) */
static void nl_emu_fault(const char *what, int c, int a, int b)
{
    fprintf(stderr, "AMX emulation: %s would fault (configured %d; tiles %d %d %d:", what,
            nl_emu.configured, c, a, b);
    for (int t = 0; t < NL_EMU_TILES; t++)
        fprintf(stderr, " %dx%d", nl_emu.rows[t], nl_emu.colsb[t]);
    fprintf(stderr, ")\n");
    abort();
}

static void nl_emu_loadconfig(const void *config)
{
    const nl_emu_config *cfg = config;
    memset(&nl_emu, 0, sizeof nl_emu);
    for (int t = 0; t < NL_EMU_TILES; t++) {
        nl_emu.rows[t] = cfg->rows[t];
        nl_emu.colsb[t] = cfg->colsb[t];
        if (cfg->rows[t] > NL_EMU_ROWS || cfg->colsb[t] > NL_EMU_COLSB)
            nl_emu_fault("LDTILECFG (a tile past 16 x 64)", t, -1, -1);
    }
    if (cfg->palette != 1)
        nl_emu_fault("LDTILECFG (palette not 1)", -1, -1, -1);
    nl_emu.configured = 1;
}

static void nl_emu_release(void) { memset(&nl_emu, 0, sizeof nl_emu); }

static void nl_emu_zero(int t)
{
    if (!nl_emu.configured)
        nl_emu_fault("TILEZERO", t, -1, -1);
    memset(nl_emu.data[t], 0, sizeof nl_emu.data[t]);
}

static void nl_emu_loadd(int t, const void *base, int64_t stride)
{
    nl_emu_zero(t);
    for (int r = 0; r < nl_emu.rows[t]; r++)
        memcpy(nl_emu.data[t][r], (const uint8_t *)base + r * stride, nl_emu.colsb[t]);
}

static void nl_emu_stored(int t, void *base, int64_t stride)
{
    if (!nl_emu.configured)
        nl_emu_fault("TILESTORED", t, -1, -1);
    for (int r = 0; r < nl_emu.rows[t]; r++)
        memcpy((uint8_t *)base + r * stride, nl_emu.data[t][r], nl_emu.colsb[t]);
}

/* a bf16 input as the instruction reads it: denormals as zero of their sign */
static float nl_emu_bf16(uint16_t bits)
{
    if ((bits & 0x7F80u) == 0)
        bits &= 0x8000u;
    const uint32_t wide = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &wide, sizeof f);
    return f;
}

/* a float32 result as the instruction writes it: denormals flushed to zero of their sign */
static float nl_emu_flush(float x)
{
    return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x;
}

static void nl_emu_dpbf16ps(int c, int a, int b)
{
    if (!nl_emu.configured || nl_emu.colsb[a] / 4 != nl_emu.rows[b] ||
        nl_emu.colsb[c] != nl_emu.colsb[b] || nl_emu.rows[c] != nl_emu.rows[a])
        nl_emu_fault("TDPBF16PS", c, a, b);
    for (int m = 0; m < nl_emu.rows[c]; m++) {
        const uint16_t *arow = (const uint16_t *)nl_emu.data[a][m];
        for (int k = 0; k < nl_emu.colsb[a] / 4; k++) {
            const uint16_t *brow = (const uint16_t *)nl_emu.data[b][k];
            for (int n = 0; n < nl_emu.colsb[c] / 4; n++) {
                float *acc = &nl_emu.data[c][m][n];
                const float even = nl_emu_bf16(arow[2 * k]) * nl_emu_bf16(brow[2 * n]);
                *acc = nl_emu_flush(*acc + even);
                const float odd = nl_emu_bf16(arow[2 * k + 1]) * nl_emu_bf16(brow[2 * n + 1]);
                *acc = nl_emu_flush(*acc + odd);
            }
        }
    }
}

#define NL_TILE_LOADCONFIG(config) nl_emu_loadconfig(config)
#define NL_TILE_RELEASE() nl_emu_release()
#define NL_TILE_ZERO(t) nl_emu_zero(t)
#define NL_TILE_LOADD(t, base, stride) nl_emu_loadd(t, base, stride)
#define NL_TILE_STORED(t, base, stride) nl_emu_stored(t, base, stride)
#define NL_TILE_DPBF16PS(c, a, b) nl_emu_dpbf16ps(c, a, b)

#endif
