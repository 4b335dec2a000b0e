// The owners' row copies, as plain loops: gathering a step's rows out of a rank's table and adding their
// updates back. numpy's fancy indexing does both in several passes (index checks, a temporary, the add, the
// write back); these make one pass over each row (the profile in README, "Throughput", shows the gain).
// Called through ctypes by hvd_w2v/native.py, which checks shapes, types and index ranges first; built
// there with g++.
#include <cstdint>

extern "C" {

// out[i] = table[rows[i]] for i < n; rows of d floats.
void hvd_w2v_take_rows(const float* table, const int64_t* rows, float* out, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; ++i) {
    const float* src = table + rows[i] * d;
    float* dst = out + i * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) dst[j] = src[j];
  }
}

// table[rows[i]] += scale[i] * updates[i] for i < n (scale null: 1); ``rows`` are unique.
void hvd_w2v_add_rows(float* table, const int64_t* rows, const float* updates, const float* scale, int64_t n,
                      int64_t d) {
  for (int64_t i = 0; i < n; ++i) {
    float* dst = table + rows[i] * d;
    const float* src = updates + i * d;
    const float s = scale ? scale[i] : 1.f;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) dst[j] += s * src[j];
  }
}

}  // extern "C"
