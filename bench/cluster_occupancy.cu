// How many thread-block clusters of 1, 2 and 4 blocks (384 threads, 214064 or 100000 bytes of
// shared memory each: one or two blocks per SM) fit at once on this GPU, as the launcher of a
// kernel of clusters asks it (cypress::max_active_clusters), beside the SM count: a persistent
// kernel of clusters runs on clusters x size SMs (issue #39, bench/NOTES.md session 30).
//   nvcc -std=c++17 -arch=sm_90a -Icypressc/backend/runtime \
//     -I$(python3 -c 'import cutlass_library, os; print(os.path.dirname(cutlass_library.__file__))')/source/include \
//     -o /tmp/occ bench/cluster_occupancy.cu && /tmp/occ
#include <cstdio>
#include "cypress.cuh"

template <int N>
__global__ void __cluster_dims__(N, 1, 1) __launch_bounds__(384, 1) k(int* p) {
  extern __shared__ int s[];
  if (p) p[blockIdx.x] = s[threadIdx.x];
}

template <int N>
static void report(int smem, int sms) {
  cudaFuncSetAttribute(k<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  int n = -1;
  const cudaError_t e = cypress::max_active_clusters(&n, k<N>, N, 384, smem);
  printf("cluster %d, smem %d: %d clusters at once = %d of %d SMs (%s)\n", N, smem, n, n * N, sms,
         cudaGetErrorString(e));
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (int smem : {214064, 100000}) {
    report<1>(smem, sms);
    report<2>(smem, sms);
    report<4>(smem, sms);
  }
  return 0;
}
