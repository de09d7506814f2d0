// Heap hooks for the runtime's memory tests: replace malloc and its family
// (operator new goes through malloc) and count, on this thread while
// `alloc_hooks::counting` is set, the allocations made and the bytes live
// (glibc's usable size of each block, so a block counts the same when it
// is freed as when it was taken). Include in exactly one file of a test
// executable.
#ifndef BATON_TESTS_RUNTIME_ALLOC_HOOKS_H_
#define BATON_TESTS_RUNTIME_ALLOC_HOOKS_H_

#include <malloc.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>

namespace alloc_hooks {
thread_local bool counting = false;
thread_local long allocations = 0;
thread_local long long live_bytes = 0;  // taken minus freed while counting
}  // namespace alloc_hooks

extern "C" void* __libc_malloc(std::size_t);
extern "C" void* __libc_calloc(std::size_t, std::size_t);
extern "C" void* __libc_realloc(void*, std::size_t);
extern "C" void* __libc_memalign(std::size_t, std::size_t);
extern "C" void __libc_free(void*);

namespace alloc_hooks {
inline void* Taken(void* p) {
  if (counting && p != nullptr) {
    ++allocations;
    live_bytes += static_cast<long long>(malloc_usable_size(p));
    // BATON_TRAP_ALLOCATION=1 stops at the first counted allocation (debugging).
    static const bool trap = std::getenv("BATON_TRAP_ALLOCATION") != nullptr;
    if (trap) __builtin_trap();
  }
  return p;
}
inline void Freed(void* p) {
  if (counting && p != nullptr) live_bytes -= static_cast<long long>(malloc_usable_size(p));
}
}  // namespace alloc_hooks

extern "C" void* malloc(std::size_t n) { return alloc_hooks::Taken(__libc_malloc(n)); }
extern "C" void* calloc(std::size_t a, std::size_t b) { return alloc_hooks::Taken(__libc_calloc(a, b)); }
extern "C" void* realloc(void* p, std::size_t n) {
  alloc_hooks::Freed(p);
  return alloc_hooks::Taken(__libc_realloc(p, n));
}
extern "C" int posix_memalign(void** out, std::size_t align, std::size_t n) {
  *out = alloc_hooks::Taken(__libc_memalign(align, n));
  return *out ? 0 : ENOMEM;
}
extern "C" void* aligned_alloc(std::size_t align, std::size_t n) {
  return alloc_hooks::Taken(__libc_memalign(align, n));
}
extern "C" void free(void* p) {
  alloc_hooks::Freed(p);
  __libc_free(p);
}

#endif  // BATON_TESTS_RUNTIME_ALLOC_HOOKS_H_
