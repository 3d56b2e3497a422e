// gemm_async through CBLAS (OpenBLAS). f32 and f64 call sgemm/dgemm directly; f16 and bf16 (as
// inputs or output, in any mix with f32) are widened to f32 exactly, multiplied with sgemm
// (accumulation in f32, as the ABI asks) and the result rounded once to nearest even. Without
// BLAS at build time the same paths run on plain loops (slow, same results within rounding).
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "api.h"
#include "dtype.h"
#include "errors.h"
#include "half.h"
#include "state.h"

#if TESSERA_HOST_HAVE_BLAS
#include <cblas.h>
#endif

namespace tessera::host {
namespace {

#if !TESSERA_HOST_HAVE_BLAS
// Builds without BLAS (a vendor's bring-up box) keep GEMM, with plain loops in CBLAS's
// column-major contract, so the reference backend's table never changes shape with the build.
// Correct, not fast: the planner's calibration will say so.
enum CBLAS_ORDER { CblasColMajor };
enum CBLAS_TRANSPOSE { CblasNoTrans, CblasTrans };

template <typename T>
void loop_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, T alpha, const T* a,
               int lda, const T* b, int ldb, T beta, T* c, int ldc) {
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      T acc = 0;
      for (int p = 0; p < k; ++p) {
        const T x = ta == CblasNoTrans ? a[i + size_t(p) * lda] : a[p + size_t(i) * lda];
        const T y = tb == CblasNoTrans ? b[p + size_t(j) * ldb] : b[j + size_t(p) * ldb];
        acc += x * y;
      }
      T& out = c[i + size_t(j) * ldc];
      out = beta == T(0) ? alpha * acc : alpha * acc + beta * out;  // beta 0: C is not read
    }
  }
}

void cblas_sgemm(CBLAS_ORDER, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k,
                 float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                 float* c, int ldc) {
  loop_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void cblas_dgemm(CBLAS_ORDER, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k,
                 double alpha, const double* a, int lda, const double* b, int ldb, double beta,
                 double* c, int ldc) {
  loop_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#endif

bool is_f32_family(int32_t dtype) {
  return dtype == TSR_DTYPE_F32 || dtype == TSR_DTYPE_F16 || dtype == TSR_DTYPE_BF16;
}

// Elements spanned by a column-major rows x cols matrix with leading dimension ld.
size_t extent(int64_t rows, int64_t cols, int64_t ld) {
  if (rows == 0 || cols == 0) return 0;
  return size_t((cols - 1) * ld + rows);
}

float load_f32(const void* base, int32_t dtype, size_t index) {
  switch (dtype) {
    case TSR_DTYPE_F16: return f16_to_f32(static_cast<const uint16_t*>(base)[index]);
    case TSR_DTYPE_BF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[index]);
    default: return static_cast<const float*>(base)[index];
  }
}

// Copies a strided rows x cols matrix of `dtype` into a packed f32 one (ld = rows).
std::vector<float> widen(const void* base, int32_t dtype, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(size_t(rows) * size_t(cols));
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) {
      out[size_t(j * rows + i)] = load_f32(base, dtype, size_t(j * ld + i));
    }
  }
  return out;
}

void narrow(const std::vector<float>& c, void* base, int32_t dtype, int64_t m, int64_t n,
            int64_t ldc) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      float value = c[size_t(j * m + i)];
      size_t at = size_t(j * ldc + i);
      switch (dtype) {
        case TSR_DTYPE_F16: static_cast<uint16_t*>(base)[at] = f32_to_f16(value); break;
        case TSR_DTYPE_BF16: static_cast<uint16_t*>(base)[at] = f32_to_bf16(value); break;
        default: static_cast<float*>(base)[at] = value; break;
      }
    }
  }
}

tsr_status run_gemm(const tsr_gemm_desc& d) {
  const CBLAS_TRANSPOSE ta = d.trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = d.trans_b ? CblasTrans : CblasNoTrans;
  const int m = int(d.m), n = int(d.n), k = int(d.k);
  if (d.dtype_ab == TSR_DTYPE_F64) {
    cblas_dgemm(CblasColMajor, ta, tb, m, n, k, d.alpha, static_cast<const double*>(d.a),
                int(d.lda), static_cast<const double*>(d.b), int(d.ldb), d.beta,
                static_cast<double*>(d.c), int(d.ldc));
    return TSR_OK;
  }
  if (d.dtype_ab == TSR_DTYPE_F32 && d.dtype_c == TSR_DTYPE_F32) {
    cblas_sgemm(CblasColMajor, ta, tb, m, n, k, float(d.alpha), static_cast<const float*>(d.a),
                int(d.lda), static_cast<const float*>(d.b), int(d.ldb), float(d.beta),
                static_cast<float*>(d.c), int(d.ldc));
    return TSR_OK;
  }
  // Mixed or 16-bit: packed f32 copies (exact), one sgemm, one rounding of C.
  const int64_t a_rows = d.trans_a ? d.k : d.m, a_cols = d.trans_a ? d.m : d.k;
  const int64_t b_rows = d.trans_b ? d.n : d.k, b_cols = d.trans_b ? d.k : d.n;
  std::vector<float> a = widen(d.a, d.dtype_ab, a_rows, a_cols, d.lda);
  std::vector<float> b = widen(d.b, d.dtype_ab, b_rows, b_cols, d.ldb);
  std::vector<float> c = d.beta != 0.0 ? widen(d.c, d.dtype_c, d.m, d.n, d.ldc)
                                       : std::vector<float>(size_t(d.m) * size_t(d.n));
  cblas_sgemm(CblasColMajor, ta, tb, m, n, k, float(d.alpha), a.data(),
              int(std::max<int64_t>(1, a_rows)), b.data(), int(std::max<int64_t>(1, b_rows)),
              float(d.beta), c.data(), m);
  narrow(c, d.c, d.dtype_c, d.m, d.n, d.ldc);
  return TSR_OK;
}

// Checks `d` and points its a, b and c at the addresses the kernel uses (resolve(): shadow
// mappings of discrete device memory, the only operands a discrete device's GEMM takes).
tsr_status validate_and_resolve(Backend& backend, tsr_gemm_desc& d) {
  static constexpr const char* kOp = "gemm_async";
  if (d.m < 0 || d.n < 0 || d.k < 0) {
    return fail(TSR_INVALID_ARGUMENT, "%s: negative size m=%lld n=%lld k=%lld", kOp, (long long)d.m,
                (long long)d.n, (long long)d.k);
  }
  if (d.m > INT_MAX || d.n > INT_MAX || d.k > INT_MAX || d.lda > INT_MAX || d.ldb > INT_MAX ||
      d.ldc > INT_MAX) {
    return fail(TSR_UNIMPLEMENTED, "%s: sizes or leading dimensions above %d (BLAS int range)", kOp,
                INT_MAX);
  }
  if ((d.trans_a != 0 && d.trans_a != 1) || (d.trans_b != 0 && d.trans_b != 1)) {
    return fail(TSR_INVALID_ARGUMENT, "%s: trans_a=%d trans_b=%d (each must be 0 or 1)", kOp,
                d.trans_a, d.trans_b);
  }
  if (!dtype_valid(d.dtype_ab) || !dtype_valid(d.dtype_c)) {
    return fail(TSR_INVALID_ARGUMENT, "%s: dtype_ab=%d dtype_c=%d (not tsr_dtype values)", kOp,
                d.dtype_ab, d.dtype_c);
  }
  bool supported = (d.dtype_ab == TSR_DTYPE_F64 && d.dtype_c == TSR_DTYPE_F64) ||
                   (is_f32_family(d.dtype_ab) && is_f32_family(d.dtype_c));
  if (!supported) {
    return fail(TSR_UNIMPLEMENTED,
                "%s: %s x %s -> %s is not supported (f64 -> f64, or f32/f16/bf16 inputs with an "
                "f32/f16/bf16 output)",
                kOp, dtype_name(d.dtype_ab), dtype_name(d.dtype_ab), dtype_name(d.dtype_c));
  }
  const int64_t a_rows = d.trans_a ? d.k : d.m, a_cols = d.trans_a ? d.m : d.k;
  const int64_t b_rows = d.trans_b ? d.n : d.k, b_cols = d.trans_b ? d.k : d.n;
  if (d.lda < std::max<int64_t>(1, a_rows) || d.ldb < std::max<int64_t>(1, b_rows) ||
      d.ldc < std::max<int64_t>(1, d.m)) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: leading dimension too small (lda=%lld needs >= %lld, ldb=%lld needs >= "
                "%lld, ldc=%lld needs >= %lld)",
                kOp, (long long)d.lda, (long long)std::max<int64_t>(1, a_rows), (long long)d.ldb,
                (long long)std::max<int64_t>(1, b_rows), (long long)d.ldc,
                (long long)std::max<int64_t>(1, d.m));
  }
  if (d.m == 0 || d.n == 0) return TSR_OK;  // nothing to touch; pointers may be NULL
  if (d.c == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: c is NULL", kOp);
  if (d.k > 0 && (d.a == nullptr || d.b == nullptr)) {
    return fail(TSR_INVALID_ARGUMENT, "%s: %s is NULL", kOp, d.a == nullptr ? "a" : "b");
  }
  const size_t ab_size = dtype_size(d.dtype_ab), c_size = dtype_size(d.dtype_c);
  const size_t a_bytes = extent(a_rows, a_cols, d.lda) * ab_size;
  const size_t b_bytes = extent(b_rows, b_cols, d.ldb) * ab_size;
  const size_t c_bytes = extent(d.m, d.n, d.ldc) * c_size;
  const bool device_only = backend.config.discrete;
  void *a, *b, *c;
  if (tsr_status s = resolve(backend.memory, kOp, "a", d.a, a_bytes, device_only, &a);
      s != TSR_OK) {
    return s;
  }
  if (tsr_status s = resolve(backend.memory, kOp, "b", d.b, b_bytes, device_only, &b);
      s != TSR_OK) {
    return s;
  }
  if (tsr_status s = resolve(backend.memory, kOp, "c", d.c, c_bytes, device_only, &c);
      s != TSR_OK) {
    return s;
  }
  if (ranges_overlap(d.c, c_bytes, d.a, a_bytes) || ranges_overlap(d.c, c_bytes, d.b, b_bytes)) {
    return fail(TSR_INVALID_ARGUMENT, "%s: c overlaps a or b", kOp);
  }
  d.a = a;
  d.b = b;
  d.c = c;
  return TSR_OK;
}

tsr_status gemm_entry(const tsr_gemm_desc* desc, tsr_stream stream_handle) {
  static constexpr const char* kOp = "gemm_async";
  return guarded(kOp, [&] {
    Backend* backend = nullptr;
    if (tsr_status s = require_backend(kOp, &backend); s != TSR_OK) return s;
    std::shared_ptr<Stream> stream;
    if (tsr_status s = lookup_stream(*backend, kOp, stream_handle, &stream); s != TSR_OK) return s;
    if (desc == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: desc is NULL", kOp);
    if (desc->struct_size < sizeof(tsr_gemm_desc)) {
      return fail(TSR_INVALID_ARGUMENT, "%s: desc->struct_size is %zu, expected at least %zu", kOp,
                  desc->struct_size, sizeof(tsr_gemm_desc));
    }
    tsr_gemm_desc d;
    std::memcpy(&d, desc, sizeof d);  // fields appended after ours are ignored
    if (tsr_status s = validate_and_resolve(*backend, d); s != TSR_OK) return s;
    if (d.m == 0 || d.n == 0) return TSR_OK;
    return stream->enqueue(kOp, /*always_run=*/false,
                           [d](tsr_status, std::string*) { return run_gemm(d); });
  });
}

}  // namespace

namespace api {
tsr_status (*const gemm_async)(const tsr_gemm_desc*, tsr_stream) = &gemm_entry;
}  // namespace api

}  // namespace tessera::host
