// Softmax cross-entropy over one microbatch, PyTorch's
// nn.CrossEntropyLoss(reduction='sum', ignore_index=-100) with the gradient
// scaled by the caller.
#include <cmath>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/view.h"
#include "layers.h"

namespace baton {

double CrossEntropy(ConstMatMap logits, std::span<const std::int32_t> labels, float grad_scale, float* dlogits,
                    std::int64_t* correct) {
  const Eigen::Index rows = logits.rows(), classes = logits.cols();
  if (static_cast<Eigen::Index>(labels.size()) != rows) {
    throw Error(fmt::format("cross-entropy: {} labels given for {} rows of logits", labels.size(), rows));
  }
  // Check every label before writing anything, so a bad batch leaves dlogits untouched.
  for (Eigen::Index i = 0; i < rows; ++i) {
    if ((labels[i] < 0 && labels[i] != kIgnoreLabel) || labels[i] >= classes) {
      throw Error(fmt::format("cross-entropy: row {} has label {}, outside [0, {}) for {} classes", i, labels[i],
                              classes, classes));
    }
  }

  double loss = 0.0;
  std::int64_t hits = 0;
  for (Eigen::Index i = 0; i < rows; ++i) {
    const std::int32_t label = labels[i];
    if (label == kIgnoreLabel) {  // no loss, no gradient (a packed sample's unfilled positions)
      if (dlogits != nullptr) MatMap(dlogits, rows, classes).row(i).setZero();
      continue;
    }
    const auto z = logits.row(i).array();  // (classes)
    Eigen::Index argmax = 0;
    const float max = z.maxCoeff(&argmax);  // the first maximum on ties, like torch.argmax
    hits += argmax == label;

    // log softmax[label] = (z[label] - max) - log sum exp(z - max): no exp overflows.
    float sum_exp;
    if (dlogits != nullptr) {
      // exp(z - max) is staged in the gradient row, then scaled into
      // (softmax - onehot) * grad_scale.
      auto d = MatMap(dlogits, rows, classes).row(i).array();
      d = (z - max).exp();
      sum_exp = d.sum();
      d *= grad_scale / sum_exp;
      d(label) -= grad_scale;
    } else {
      sum_exp = (z - max).exp().sum();
    }
    loss += static_cast<double>(std::log(sum_exp)) - static_cast<double>(z(label) - max);
  }
  if (correct != nullptr) *correct += hits;
  return loss;
}

}  // namespace baton
