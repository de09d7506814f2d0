// Agreement on failure across ranks.
#include <exception>

#include "baton/comm.h"

#include <cstring>
#include <string>
#include <vector>

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

void BroadcastInts(Transport& t, std::vector<int>* values) {
  std::string bytes(reinterpret_cast<const char*>(values->data()), values->size() * sizeof(int));
  t.BroadcastString(&bytes);
  values->resize(bytes.size() / sizeof(int));
  std::memcpy(values->data(), bytes.data(), values->size() * sizeof(int));
}

}  // namespace baton
