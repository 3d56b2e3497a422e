// gemm_async (column-major, BLAS conventions) against a naive float64 reference. The bound per
// element is (k + 2) * 2 * eps(accumulator) * (|alpha| sum|a||b| + |beta c|), plus one rounding
// of the destination: loose enough for any summation order, tight enough to catch a wrong
// transpose, leading dimension or scaling.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "fixture.h"
#include "reference.h"
#include "support.h"

namespace tessera::cts {
namespace {

class Gemm : public DeviceTest {};

struct Shape {
  int64_t m, n, k;
};
constexpr Shape kShapes[] = {{1, 1, 1}, {17, 33, 65}, {64, 48, 96}};

double epsilon(tsr_dtype dtype) {
  return std::ldexp(1.0, -(float_format(dtype).precision - 1));
}

// A column-major matrix stored with leading dimension ld, padding rows included.
struct Matrix {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<uint64_t> bits;  // encodings in `dtype`
  tsr_dtype dtype = TSR_DTYPE_F32;
  double at(int64_t r, int64_t c) const { return decode_float(bits[r + c * ld], dtype); }
};

Matrix random_matrix(std::mt19937_64& rng, int64_t rows, int64_t cols, int64_t pad,
                     tsr_dtype dtype) {
  Matrix out;
  out.rows = rows;
  out.cols = cols;
  out.ld = rows + pad;
  out.dtype = dtype;
  out.bits.resize(out.ld * cols);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  for (auto& bits : out.bits) bits = encode_double(value(rng), dtype);  // quantised to dtype
  return out;
}

::testing::AssertionResult upload(const Matrix& matrix, DeviceMemory* out,
                                  const OwnedStream& stream) {
  const size_t size = dtype_size(matrix.dtype);
  std::vector<uint8_t> packed(std::max<size_t>(1, matrix.bits.size() * size));
  for (size_t i = 0; i < matrix.bits.size(); ++i) {
    store_element(packed.data(), i, matrix.bits[i], matrix.dtype);
  }
  auto ok = status_is(TSR_OK, DeviceMemory::allocate(0, packed.size(), out), "device_malloc");
  if (!ok) return ok;
  return copy_and_wait(out->get(), packed.data(), packed.size(), stream);
}

void check_gemm(tsr_dtype ab, tsr_dtype c_type, Shape shape, int trans_a, int trans_b, double alpha,
                double beta, std::mt19937_64& rng, const OwnedStream& stream) {
  SCOPED_TRACE(std::string(dtype_name(ab)) + "->" + dtype_name(c_type) +
               " m=" + std::to_string(shape.m) + " n=" + std::to_string(shape.n) +
               " k=" + std::to_string(shape.k) + " trans_a=" + std::to_string(trans_a) +
               " trans_b=" + std::to_string(trans_b) + " alpha=" + std::to_string(alpha) +
               " beta=" + std::to_string(beta));
  const auto [m, n, k] = shape;
  // Stored shapes: A is m x k, or k x m when transposed; B is k x n, or n x k. Padding rows make
  // every leading dimension larger than the matrix.
  const Matrix a = trans_a ? random_matrix(rng, k, m, 3, ab) : random_matrix(rng, m, k, 3, ab);
  const Matrix b = trans_b ? random_matrix(rng, n, k, 2, ab) : random_matrix(rng, k, n, 2, ab);
  const Matrix c0 = random_matrix(rng, m, n, 5, c_type);
  DeviceMemory da, db, dc;
  ASSERT_TRUE(upload(a, &da, stream));
  ASSERT_TRUE(upload(b, &db, stream));
  ASSERT_TRUE(upload(c0, &dc, stream));

  tsr_gemm_desc desc{};
  desc.struct_size = sizeof desc;
  desc.trans_a = trans_a;
  desc.trans_b = trans_b;
  desc.m = m;
  desc.n = n;
  desc.k = k;
  desc.alpha = alpha;
  desc.beta = beta;
  desc.a = da.get();
  desc.lda = a.ld;
  desc.b = db.get();
  desc.ldb = b.ld;
  desc.c = dc.get();
  desc.ldc = c0.ld;
  desc.dtype_ab = ab;
  desc.dtype_c = c_type;
  CTS_ASSERT_OK(api().gemm_async(&desc, stream.get()));
  desc = tsr_gemm_desc{};  // the backend must have copied it
  CTS_ASSERT_OK(stream.synchronize());

  const size_t size = dtype_size(c_type);
  std::vector<uint8_t> result(c0.bits.size() * size);
  ASSERT_TRUE(copy_and_wait(result.data(), dc.get(), result.size(), stream));
  // Accumulation is at least f32 (backend_abi.h); f64 operands are held to f64.
  const double eps_acc = ab == TSR_DTYPE_F64 ? epsilon(TSR_DTYPE_F64) : epsilon(TSR_DTYPE_F32);
  const double eps_dst = epsilon(c_type);
  int reported = 0;
  for (int64_t col = 0; col < n; ++col) {
    for (int64_t row = 0; row < c0.ld; ++row) {
      const uint64_t actual_bits = load_element(result.data(), row + col * c0.ld, c_type);
      if (row >= m) {  // padding rows of C are not part of the matrix
        if (actual_bits != c0.bits[row + col * c0.ld] && reported++ < 5) {
          ADD_FAILURE() << "padding C(" << row << "," << col << ") was written";
        }
        continue;
      }
      double exact = 0;
      double scale = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double x = trans_a ? a.at(l, row) : a.at(row, l);
        const double y = trans_b ? b.at(col, l) : b.at(l, col);
        exact += x * y;
        scale += std::fabs(x * y);
      }
      const double c_in = c0.at(row, col);
      const double expected = alpha * exact + beta * c_in;
      const double bound =
          (k + 2) * 2 * eps_acc * (std::fabs(alpha) * scale + std::fabs(beta * c_in)) +
          eps_dst * std::fabs(expected) + 1e-300;
      const double actual = decode_float(actual_bits, c_type);
      if (!(std::fabs(actual - expected) <= bound) && reported++ < 5) {
        ADD_FAILURE() << "C(" << row << "," << col << ") = " << actual << ", expected " << expected
                      << " within " << bound;
      }
    }
  }
}

void check_all_shapes(tsr_dtype ab, tsr_dtype c_type) {
  SCOPED_TRACE(CtsTest::seed_note());
  auto rng = CtsTest::make_rng();
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  for (const Shape& shape : kShapes) {
    for (int trans_a : {0, 1}) {
      for (int trans_b : {0, 1}) {
        check_gemm(ab, c_type, shape, trans_a, trans_b, 1.0, 0.0, rng, stream);
        check_gemm(ab, c_type, shape, trans_a, trans_b, 1.5, -0.5, rng, stream);
      }
    }
  }
}

CTS_TEST(Gemm, MultipliesF32MatricesInEveryTransposeCombination, "gemm_async") {
  check_all_shapes(TSR_DTYPE_F32, TSR_DTYPE_F32);
}
CTS_TEST(Gemm, MultipliesF64MatricesInEveryTransposeCombination, "gemm_async") {
  check_all_shapes(TSR_DTYPE_F64, TSR_DTYPE_F64);
}
CTS_TEST(Gemm, MultipliesBf16MatricesIntoF32, "gemm_async") {
  check_all_shapes(TSR_DTYPE_BF16, TSR_DTYPE_F32);
}
CTS_TEST(Gemm, MultipliesF16MatricesIntoF32, "gemm_async") {
  check_all_shapes(TSR_DTYPE_F16, TSR_DTYPE_F32);
}
CTS_TEST(Gemm, MultipliesBf16MatricesIntoBf16, "gemm_async") {
  check_all_shapes(TSR_DTYPE_BF16, TSR_DTYPE_BF16);
}
CTS_TEST(Gemm, MultipliesF16MatricesIntoF16, "gemm_async") {
  check_all_shapes(TSR_DTYPE_F16, TSR_DTYPE_F16);
}

CTS_TEST(Gemm, ScalesCByBetaWhenKIsZeroAndDoesNothingWhenMIsZero, "gemm_async") {
  SCOPED_TRACE(seed_note());
  auto rng = make_rng();
  OwnedStream stream;
  CTS_ASSERT_OK(OwnedStream::create(0, &stream));
  check_gemm(TSR_DTYPE_F32, TSR_DTYPE_F32, {5, 4, 0}, 0, 0, 2.0, 0.5, rng, stream);
  check_gemm(TSR_DTYPE_F32, TSR_DTYPE_F32, {0, 4, 3}, 0, 0, 2.0, 0.5, rng, stream);
}

}  // namespace
}  // namespace tessera::cts
