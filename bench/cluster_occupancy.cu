// How many thread-block clusters of 1, 2 and 4 blocks (384 threads, ~209 KiB of shared memory
// each: one block per SM, as cypressc's GEMM kernels) fit at once on this GPU
// (cudaOccupancyMaxActiveClusters), beside its SM count: a persistent kernel of clusters runs
// on clusters x size SMs (issue #39, bench/NOTES.md session 30).
//   nvcc -std=c++17 -arch=sm_90a -o /tmp/occ bench/cluster_occupancy.cu && /tmp/occ
#include <cstdio>
#include <cuda_runtime.h>

template <int N>
__global__ void __cluster_dims__(N, 1, 1) __launch_bounds__(384, 1) k(int* p) {
  extern __shared__ int s[];
  if (p) p[blockIdx.x] = s[threadIdx.x];
}

template <int N>
static void report(int smem, int sms) {
  cudaFuncSetAttribute(k<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(N, 1, 1);
  cfg.blockDim = dim3(384, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = N;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int n = -1;
  cudaError_t e = cudaOccupancyMaxActiveClusters(&n, reinterpret_cast<const void*>(k<N>), &cfg);
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
