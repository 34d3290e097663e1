// core/cuda_local_ops.hpp in a build without CUDA: there are no GPU ranks to move memory
// between. With CUDA this file is empty and core/cuda_local_ops.cu defines make_cuda_mem_ops.
#include "core/cuda_local_ops.hpp"

#include "core/error.hpp"

namespace dpbench {

#ifndef DPBENCH_HAVE_CUDA

std::unique_ptr<LocalMemOps> make_cuda_mem_ops(int, DeviceAllocator&, void*, int) {
  throw Error("local backend on GPU: dpbench was built without CUDA");
}

#endif  // DPBENCH_HAVE_CUDA

}  // namespace dpbench
