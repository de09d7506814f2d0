// Views of row-major float32 matrices over preallocated memory. Rows are
// samples, columns features, as in PyTorch's (batch, features) tensors.
#ifndef BATON_TENSOR_H_
#define BATON_TENSOR_H_

#include <Eigen/Core>

#include "baton/buffer.h"

namespace baton {


using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<RowMatrix>;
using ConstMatMap = Eigen::Map<const RowMatrix>;

}  // namespace baton

#endif  // BATON_TENSOR_H_
