// Matrix products for the host layers, through OpenBLAS's SGEMM (CBLAS),
// loaded on first use (blas.h).
//
// The layers hand in Eigen views (Maps of row-major matrices and their
// transposes); Product reads each operand's storage order and leading
// dimension and calls cblas_sgemm on the memory in place: no copies, no
// temporaries, and no heap allocation by baton (OpenBLAS keeps its packing
// buffers in a pool it sets up on its first call, outside the heap).
//
// Threads: OpenBLAS computes with one thread per rank unless the user sets
// OPENBLAS_NUM_THREADS, as PyTorch users set OMP_NUM_THREADS: ranks are
// processes, and a process per core is how a pipeline fills a machine
// (LoadedBlas).
// With any thread count an element of the result is one thread's sum, so
// runs stay bit-reproducible.
#ifndef BATON_HOST_GEMM_H_
#define BATON_HOST_GEMM_H_

#include <Eigen/Core>
#include <type_traits>

#include "blas.h"

namespace baton::host_detail {

// The running GEMM meter of this thread (StartGemmMeter), or null.
struct GemmMeter;
extern thread_local GemmMeter* tls_gemm_meter;
// Time and shape of one product, for the meter.
double MeterNow();
void MeterAdd(GemmMeter* meter, bool trans_a, bool trans_b, long m, long n, long k, float beta, double seconds);

template <typename M>
constexpr bool kRowMajor = (int(std::remove_reference_t<M>::Flags) & Eigen::RowMajorBit) != 0;

// c = a * b + beta * c for float matrices with unit inner stride (Maps,
// their transposes, blocks of them). beta = 0 overwrites c without reading
// it. c: (rows, cols) row-major  a: (rows, depth)  b: (depth, cols).
// REQUIRES: c aliases neither a nor b.
template <typename Dst, typename Lhs, typename Rhs>
void Product(Dst&& c, const Lhs& a, const Rhs& b, float beta) {
  using DstType = std::remove_reference_t<Dst>;
  static_assert(kRowMajor<DstType>, "Product writes row-major results");
  static_assert(DstType::InnerStrideAtCompileTime == 1 && Lhs::InnerStrideAtCompileTime == 1 &&
                    Rhs::InnerStrideAtCompileTime == 1,
                "Product needs unit inner strides");
  eigen_assert(c.rows() == a.rows() && c.cols() == b.cols() && a.cols() == b.rows());
  if (c.rows() == 0 || c.cols() == 0) return;
  if (a.cols() == 0) {
    if (beta == 0.0f) c.setZero();
    return;
  }
  const Blas& blas = LoadedBlas();
  GemmMeter* meter = tls_gemm_meter;
  const double start = meter != nullptr ? MeterNow() : 0.0;
  // A column-major view is the transpose of a row-major matrix whose leading
  // dimension is its outer stride.
  blas.sgemm(CblasRowMajor, kRowMajor<Lhs> ? CblasNoTrans : CblasTrans, kRowMajor<Rhs> ? CblasNoTrans : CblasTrans,
              static_cast<blasint>(c.rows()), static_cast<blasint>(c.cols()), static_cast<blasint>(a.cols()), 1.0f,
              a.data(), static_cast<blasint>(a.outerStride()), b.data(), static_cast<blasint>(b.outerStride()), beta,
              c.data(), static_cast<blasint>(c.outerStride()));
  if (meter != nullptr) {
    MeterAdd(meter, !kRowMajor<Lhs>, !kRowMajor<Rhs>, c.rows(), c.cols(), a.cols(), beta, MeterNow() - start);
  }
}

// c += a * b.
template <typename Dst, typename Lhs, typename Rhs>
void AddProduct(Dst&& c, const Lhs& a, const Rhs& b) {
  Product(std::forward<Dst>(c), a, b, 1.0f);
}

}  // namespace baton::host_detail

#endif  // BATON_HOST_GEMM_H_
