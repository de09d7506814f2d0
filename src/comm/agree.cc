// Agreement on failure across ranks.
#include <exception>

#include "baton/comm.h"
#include "baton/error.h"

namespace baton {

void Agree(Transport& t, std::string_view what, const std::function<void()>& work) {
  std::exception_ptr failure;
  try {
    work();
  } catch (...) {
    failure = std::current_exception();
  }
  // The lowest failing rank reports; the others end quietly.
  const int worst = t.AllMax(failure ? t.size() - t.rank() : -1, what);
  if (worst < 0) return;
  if (t.size() - worst != t.rank()) throw PeerFailed();
  std::rethrow_exception(failure);
}

}  // namespace baton
