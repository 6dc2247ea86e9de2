// Rows of a table (embeddings): table (V, D), ids (S,) flattened, holding whole numbers as
// int32, int64 or float32 (ID_KIND 0, 1, 2 selects the loader), rows (S, D).
#include "neonlite_common.cuh"

template <int ID_KIND>
__device__ __forceinline__ long long nl_row_id(const void* ids, long long s, bool* whole) {
    if (ID_KIND == 0) { *whole = true; return ((const int*)ids)[s]; }
    if (ID_KIND == 1) { *whole = true; return ((const long long*)ids)[s]; }
    float f = ((const float*)ids)[s];
    long long v = (long long)f;
    *whole = (float)v == f;
    return v;
}

// out[s, :] = table[ids[s], :].  An id that is not a whole number in [0, V) writes nothing and
// leaves in *bad the smallest such position s (bad starts at S: no bad id).
template <int KIND, int ID_KIND>
__device__ void nl_take_rows_impl(typename nl_elem<KIND>::T* out,
                                  const typename nl_elem<KIND>::T* table, const void* ids,
                                  long long S, long long V, long long D,
                                  unsigned long long* bad) {
    NL_FOR(i, S * D) {
        long long s = i / D, col = i - s * D;
        bool whole;
        long long id = nl_row_id<ID_KIND>(ids, s, &whole);
        if (!whole || id < 0 || id >= V) {
            atomicMin(bad, (unsigned long long)s);
            continue;
        }
        out[i] = table[id * D + col];
    }
}

// grad_table[ids[s], :] += rows[s, :] for s = 0, 1, ..., S-1 in order.  Thread i owns column
// i % D of the ids id with id % parts == i / D (parts = the launch's threads / D, at least 1):
// it walks the ids in order and adds only its own, so each (id, column) is summed by one thread
// in a fixed order (deterministic, no atomics) while D * parts threads share the work (every
// thread of a warp reads the same id: a broadcast).  A bad id is skipped and reported in *bad
// as in nl_take_rows.
template <int KIND, int ID_KIND>
__device__ void nl_scatter_add_rows_impl(typename nl_elem<KIND>::T* grad_table,
                                         const typename nl_elem<KIND>::T* rows, const void* ids,
                                         long long S, long long V, long long D,
                                         unsigned long long* bad) {
    typedef nl_elem<KIND> E;
    const long long threads = (long long)blockDim.x * gridDim.x;
    const long long parts = threads / D > 0 ? threads / D : 1;
    NL_FOR(i, D * parts) {
        const long long col = i % D, part = i / D;
        for (long long s = 0; s < S; ++s) {
            bool whole;
            long long id = nl_row_id<ID_KIND>(ids, s, &whole);
            if (!whole || id < 0 || id >= V) {
                if (part == 0) atomicMin(bad, (unsigned long long)s);
                continue;
            }
            if (id % parts != part) continue;
            long long dst = id * D + col;
            E::store(grad_table, dst, E::load(grad_table, dst) + E::load(rows, s * D + col));
        }
    }
}

#define NL_ROWS_ENTRY(suffix, KIND, T, ID_KIND)                                                 \
    extern "C" __global__ void nl_take_rows_##suffix(T* out, const T* table, const void* ids,   \
                                                     long long S, long long V, long long D,     \
                                                     unsigned long long* bad) {                 \
        nl_take_rows_impl<KIND, ID_KIND>(out, table, ids, S, V, D, bad);                        \
    }                                                                                           \
    extern "C" __global__ void nl_scatter_add_rows_##suffix(T* grad_table, const T* rows,       \
                                                            const void* ids, long long S,       \
                                                            long long V, long long D,           \
                                                            unsigned long long* bad) {          \
        nl_scatter_add_rows_impl<KIND, ID_KIND>(grad_table, rows, ids, S, V, D, bad);           \
    }

NL_ROWS_ENTRY(f32_i32, 0, float, 0)
NL_ROWS_ENTRY(f32_i64, 0, float, 1)
NL_ROWS_ENTRY(f32_f32, 0, float, 2)
NL_ROWS_ENTRY(f16_i32, 1, nl_u16, 0)
NL_ROWS_ENTRY(f16_i64, 1, nl_u16, 1)
NL_ROWS_ENTRY(f16_f32, 1, nl_u16, 2)
NL_ROWS_ENTRY(bf16_i32, 2, nl_u16, 0)
NL_ROWS_ENTRY(bf16_i64, 2, nl_u16, 1)
NL_ROWS_ENTRY(bf16_f32, 2, nl_u16, 2)
