// How a baton process treats the memory it frees.
//
// glibc gives memory back to the kernel once more than M_TRIM_THRESHOLD lies
// free at the top of its heap, and serves blocks over M_MMAP_THRESHOLD with
// mappings of their own, unmapped on free; both thresholds move with the
// sizes freed so far. A process that builds and drops large schedules over
// and over (a comparison of schedules, the tuner's hundreds of candidates)
// then faults fresh pages in again and again: 11-16 us per 4 KiB page on the
// virtual machines baton is measured on, 60 ms and more for the 21 MB of a
// 64 x 1024 x 2 interleaved schedule and its lowered form, more than the
// work. Keeping freed memory for reuse makes that work cost what it does.
// A training step allocates nothing, and setup allocates once, so the
// runtime's footprint does not change.
#ifndef BATON_HEAP_H_
#define BATON_HEAP_H_

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <climits>

namespace baton {

// Every block from the heap, which is never trimmed (glibc; a no-op with
// another C library). Call once, first thing in main.
inline void KeepFreedMemory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

}  // namespace baton

#endif  // BATON_HEAP_H_
