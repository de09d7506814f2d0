// OpenBLAS, loaded the first time the host computes, not when baton starts:
// commands that only plan or simulate never load it (nor start its thread
// pool), and the process picks its thread count and kernels before it
// loads. The host layers' products (gemm.h), the product rate and the meter
// call it through here.
#ifndef BATON_HOST_BLAS_H_
#define BATON_HOST_BLAS_H_

#include <cblas.h>

namespace baton::host_detail {

struct Blas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&openblas_get_corename) corename = nullptr;
  decltype(&openblas_get_num_threads) num_threads = nullptr;
};

// OpenBLAS's functions, loaded once per process (thread-safe): the library
// the build was configured with, else libopenblas.so.0 on the loader's
// path. Its threads: OPENBLAS_NUM_THREADS where the user set it, else one
// per rank (the variable is set while OpenBLAS loads, so no pool starts).
// Throws Error naming the library and the loader's reason when it cannot.
const Blas& LoadedBlas();

}  // namespace baton::host_detail

#endif  // BATON_HOST_BLAS_H_
