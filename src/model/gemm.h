// Matrix products for the layers that never touch the heap.
//
// Why not plain `c.noalias() += a * b`: for operands past a few dozen rows
// Eigen sizes its GEMM packing buffers from the cache sizes (a kc x mc panel
// of one operand and a kc x nc panel of the other, up to about 1.5 MB) and
// takes them from the heap whenever one exceeds EIGEN_STACK_ALLOCATION_LIMIT
// (128 KiB). A 64 x 784 x 256 layer already allocates on every forward, and a
// training step must not allocate. AddProduct runs the same Eigen kernel
// (pack + gebp, Eigen's internal general_matrix_matrix_product) with block
// sizes clamped so that both packed panels fit under that limit, which makes
// Eigen place them on the stack (alloca). Measured on 32..256-row layers it is
// as fast as Eigen's own blocking. Matrix-vector shapes go through Eigen's
// public product, whose GEMV path uses contiguous operands in place.
//
// This leans on Eigen internals (level3_blocking, general_matrix_matrix_product,
// computeProductBlockingSizes) as shipped in Eigen 3.4; they are confined to
// this header.
#ifndef BATON_MODEL_GEMM_H_
#define BATON_MODEL_GEMM_H_

#include <algorithm>
#include <type_traits>

#include <Eigen/Core>

namespace baton::model_detail {

#if !defined(EIGEN_ALLOCA)
#error "AddProduct needs Eigen's stack allocation (EIGEN_ALLOCA) to keep GEMM off the heap"
#endif
static_assert(EIGEN_STACK_ALLOCATION_LIMIT >= 16 * 1024, "the GEMM panels need some stack to live on");

// Eigen's cache blocking for one float product, clamped so that each packed
// panel holds at most EIGEN_STACK_ALLOCATION_LIMIT bytes. m, n, k are the
// rows, columns and depth of the column-major product Eigen computes.
class StackBlocking : public Eigen::internal::level3_blocking<float, float> {
 public:
  StackBlocking(Eigen::Index m, Eigen::Index n, Eigen::Index k) {
    using Traits = Eigen::internal::gebp_traits<float, float>;
    constexpr Eigen::Index kPanelFloats = EIGEN_STACK_ALLOCATION_LIMIT / sizeof(float);
    // Depth blocks past 256 buy little (the kernel's accumulators already
    // amortise the loads) and would leave room for only a few rows per panel.
    constexpr Eigen::Index kMaxDepthBlock = 256;
    m_mc = m;
    m_nc = n;
    m_kc = k;
    Eigen::internal::computeProductBlockingSizes<float, float, 1>(m_kc, m_mc, m_nc, Eigen::Index{1});
    m_kc = std::clamp<Eigen::Index>(m_kc, 1, kMaxDepthBlock);
    const Eigen::Index fit = kPanelFloats / m_kc;
    if (m_mc > fit) m_mc = std::max<Eigen::Index>(fit / Traits::mr * Traits::mr, 1);
    if (m_nc > fit) m_nc = std::max<Eigen::Index>(fit / Traits::nr * Traits::nr, 1);
  }
};

// c += a * b for float matrices with unit inner stride (Maps, their
// transposes, blocks of them), without heap allocation.
// c: (rows, cols) row-major  a: (rows, depth)  b: (depth, cols).
// REQUIRES: c aliases neither a nor b.
template <typename Dst, typename Lhs, typename Rhs>
void AddProduct(Dst&& c, const Lhs& a, const Rhs& b) {
  using Index = Eigen::Index;
  using DstType = std::remove_reference_t<Dst>;
  static_assert(int(DstType::Flags) & Eigen::RowMajorBit, "AddProduct writes row-major results");
  static_assert(DstType::InnerStrideAtCompileTime == 1 && Lhs::InnerStrideAtCompileTime == 1 &&
                    Rhs::InnerStrideAtCompileTime == 1,
                "AddProduct needs unit inner strides");
  eigen_assert(c.rows() == a.rows() && c.cols() == b.cols() && a.cols() == b.rows());
  if (c.rows() == 0 || c.cols() == 0 || a.cols() == 0) return;
  if (c.rows() == 1 || c.cols() == 1) {
    // GEMV: with contiguous vectors (all the layers pass) Eigen reads and
    // writes them in place and needs no buffer.
    c.noalias() += a * b;
    return;
  }
  constexpr int kLhsOrder = (int(Lhs::Flags) & Eigen::RowMajorBit) ? Eigen::RowMajor : Eigen::ColMajor;
  constexpr int kRhsOrder = (int(Rhs::Flags) & Eigen::RowMajorBit) ? Eigen::RowMajor : Eigen::ColMajor;
  // Eigen computes a row-major product as the column-major c^T = b^T a^T.
  StackBlocking blocking(c.cols(), c.rows(), a.cols());
  using Gemm = Eigen::internal::general_matrix_matrix_product<Index, float, kLhsOrder, /*ConjugateLhs=*/false, float,
                                                              kRhsOrder, /*ConjugateRhs=*/false, Eigen::RowMajor,
                                                              /*ResInnerStride=*/1>;
  Gemm::run(c.rows(), c.cols(), a.cols(), a.data(), a.outerStride(), b.data(), b.outerStride(), c.data(),
            /*resIncr=*/1, c.outerStride(), /*alpha=*/1.0f, blocking);
}

}  // namespace baton::model_detail

#endif  // BATON_MODEL_GEMM_H_
