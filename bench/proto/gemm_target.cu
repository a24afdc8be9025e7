// gemm_target.cu — hand-written model of what cypressc's CUDA lowering emits for programs/gemm.cyp
// on Hopper: C[M,N] = A[M,K] @ B[K,N], all row-major, 16-bit in, f32 accumulate, 16-bit out.
// One warp-specialized kernel, compile-time constants only, calls into cypress.cuh.
//
// nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Icypressc/backend/runtime -I<cutlass>/include
//      -Xcompiler -fPIC -shared -o libgemm.so bench/proto/gemm_target.cu     (-DCYP_BF16 for bf16)
#include <cstdio>
#include "cypress.cuh"

// ---- compile-time constants (what the mapping fixes) -------------------------------------------
#ifndef CYP_BM
#define CYP_BM 128
#endif
#ifndef CYP_BN
#define CYP_BN 256
#endif
#ifndef CYP_STAGES         // 3: with the TMA-store epilogue's 64 KB C buffer, 4 stages no longer fit
#define CYP_STAGES 3
#endif
#ifndef CYP_CONSUMERS
#define CYP_CONSUMERS 2
#endif
#ifndef CYP_GROUP_M        // block rasterization: tiles walk GROUP_M tile-rows at a time (1 = row-major)
#define CYP_GROUP_M 16
#endif
#ifndef CYP_PERSISTENT     // 1: grid = #SMs and each block loops over tiles; 0: one block per tile
#define CYP_PERSISTENT 1
#endif
#ifndef CYP_EPI_TMA        // 1: registers -> swizzled smem -> TMA store; 0: direct 4-byte global stores
#define CYP_EPI_TMA 1
#endif

constexpr int BM = CYP_BM, BN = CYP_BN, BK = 64, STAGES = CYP_STAGES, CONSUMERS = CYP_CONSUMERS;
constexpr int GROUP_M = CYP_GROUP_M;
constexpr bool EPI_TMA = CYP_EPI_TMA;
#ifdef CYP_BF16
using T = __nv_bfloat16;
constexpr bool IS_BF16 = true;
#else
using T = __half;
constexpr bool IS_BF16 = false;
#endif

constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int WG_M = BM / CONSUMERS;   // rows of C owned by one consumer warpgroup
constexpr int ATOMS = WG_M / 64;       // m64 wgmma atoms per consumer
constexpr int KSLICES = BK / 16;       // wgmmas (k16) per stage per atom
constexpr int A_STAGE = BM * BK * 2;   // bytes of one A stage (K-major, 128 B rows)
constexpr int B_CHUNK = BK * 64 * 2;   // bytes of one 64-column chunk of a B stage (MN-major)
constexpr int B_STAGE = BK * BN * 2;
constexpr int C_BOX = 64 * 64 * 2;     // one 64x64 swizzled box of the C staging buffer
constexpr int C_BYTES = EPI_TMA ? BM * BN * 2 : 0;
constexpr int SMEM_BYTES = 1024 /*alignment slack*/ + STAGES * (A_STAGE + B_STAGE) + C_BYTES + 2 * STAGES * 8;
static_assert(BK * 2 == 128, "one K-major row of a stage is one 128-byte swizzle row");
static_assert(WG_M % 64 == 0 && BN % 64 == 0 && BN <= 256 && BM <= 256, "tile shape");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory");

// ---- the kernel ---------------------------------------------------------------------------------
__global__ void __launch_bounds__(THREADS, 1)
gemm_kernel(const __grid_constant__ CUtensorMap tmA,   // A: inner K, outer M, box {64, BM}
            const __grid_constant__ CUtensorMap tmB,   // B: inner N, outer K, box {64, BK}
            const __grid_constant__ CUtensorMap tmC,   // C: inner N, outer M, box {64, 64} (EPI_TMA)
            T* __restrict__ C, int M, int N, int K) {
  // -- prologue: carve dynamic shared memory, init full/empty mbarriers --------------------------
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = cypress::align_smem(smem_raw, 1024);
  uint8_t* sA = smem;                                   // [STAGES][BM rows][64 k]   swizzled
  uint8_t* sB = sA + STAGES * A_STAGE;                  // [STAGES][BN/64][BK k][64 n] swizzled
  uint8_t* sC = sB + STAGES * B_STAGE;                  // [BM/64][BN/64][64][64]    swizzled
  cypress::bar_t* full = reinterpret_cast<cypress::bar_t*>(sC + C_BYTES);   // TMA landed stage s
  cypress::bar_t* empty = full + STAGES;                                    // consumers freed s

  const int num_m = (M + BM - 1) / BM, num_n = (N + BN - 1) / BN, num_tiles = num_m * num_n;
  const int num_k = (K + BK - 1) / BK;
  // tile index -> (tile_m, tile_n), GROUP_M tile-rows at a time so neighbours share A/B in L2
  auto tile_coords = [&](int t, int& m0, int& n0) {
    const int group = t / (GROUP_M * num_n), first_m = group * GROUP_M;
    const int rows = min(num_m - first_m, GROUP_M), r = t % (GROUP_M * num_n);
    m0 = (first_m + r % rows) * BM;
    n0 = (r / rows) * BN;
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      cypress::init(&full[s], 1);            // one producer arrival (+ TMA bytes) per phase
      cypress::init(&empty[s], CONSUMERS);   // one arrival per consumer warpgroup per phase
    }
    cypress::fence_barrier_init();
  }
  __syncthreads();

  const int wg = cypress::warpgroup_idx();
  if (wg == 0) {
    // -- producer warpgroup: one elected thread streams A and B tiles through TMA ----------------
    cypress::regs_dealloc<40>();
    if (cypress::warp_in_warpgroup() == 0 && cypress::elect_one()) {
      cypress::tma_prefetch(&tmA);
      cypress::tma_prefetch(&tmB);
      int s = 0, phase = 0;
      for (int t = blockIdx.x; t < num_tiles; t += gridDim.x) {
        int m0, n0;
        tile_coords(t, m0, n0);
        for (int kb = 0; kb < num_k; ++kb) {
          cypress::wait(&empty[s], phase ^ 1);                       // stage s free again
          cypress::arrive_expect_tx(&full[s], A_STAGE + B_STAGE);    // bytes the TMAs will land
          cypress::tma_load_2d(sA + s * A_STAGE, &tmA, &full[s], kb * BK, m0);
#pragma unroll
          for (int j = 0; j < BN / 64; ++j)
            cypress::tma_load_2d(sB + s * B_STAGE + j * B_CHUNK, &tmB, &full[s], n0 + 64 * j, kb * BK);
          if (++s == STAGES) { s = 0; phase ^= 1; }
        }
      }
    }
  } else {
    // -- consumer warpgroups: wgmma over the stages, f32 accumulators in registers ---------------
    cypress::regs_alloc<CONSUMERS == 1 ? 240 : 232>();
    const int cw = wg - 1;                          // this consumer owns rows [cw*WG_M, +WG_M)
    const bool leader = threadIdx.x % 128 == 0;     // arrives on empty / issues TMA stores
    float acc[ATOMS][BN / 2];
    int s = 0, phase = 0;
    for (int t = blockIdx.x; t < num_tiles; t += gridDim.x) {
      int m0, n0;
      tile_coords(t, m0, n0);
#pragma unroll
      for (int a = 0; a < ATOMS; ++a)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[a][i] = 0.f;

      int prev_s = 0;
      for (int kb = 0; kb < num_k; ++kb) {
        cypress::wait(&full[s], phase);                             // stage s landed
#pragma unroll
        for (int a = 0; a < ATOMS; ++a) cypress::fence_acc(acc[a]);
        cypress::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KSLICES; ++kk) {
          const uint64_t db = cypress::desc_mn_sw128(sB + s * B_STAGE + kk * 16 * 128, B_CHUNK);
#pragma unroll
          for (int a = 0; a < ATOMS; ++a) {
            const uint64_t da = cypress::desc_k_sw128(sA + s * A_STAGE + (cw * WG_M + a * 64) * 128 + kk * 32);
            cypress::wgmma<BN, T>(da, db, acc[a]);
          }
        }
        cypress::commit();
#pragma unroll
        for (int a = 0; a < ATOMS; ++a) cypress::fence_acc(acc[a]);
        cypress::wait<1>();                                          // keep one group in flight
        if (kb > 0 && leader) cypress::arrive(&empty[prev_s]);       // previous stage is free
        prev_s = s;
        if (++s == STAGES) { s = 0; phase ^= 1; }
      }
      cypress::wait<0>();
#pragma unroll
      for (int a = 0; a < ATOMS; ++a) cypress::fence_acc(acc[a]);
      if (num_k > 0 && leader) cypress::arrive(&empty[prev_s]);     // release the last stage

      // -- epilogue: f32 -> 16-bit -> global ------------------------------------------------------
      if constexpr (EPI_TMA) {
        uint8_t* myC = sC + cw * (WG_M * BN * 2);
        if (leader) cypress::tma_store_wait<0>();                    // last tile's store read myC
        cypress::named_sync(1 + cw, 128);
#pragma unroll
        for (int a = 0; a < ATOMS; ++a)
#pragma unroll
          for (int j = 0; j < BN / 4; ++j) {
            const int2 rc = cypress::acc_coord(j);
            uint8_t* box = myC + (a * (BN / 64) + rc.y / 64) * C_BOX;
            *reinterpret_cast<uint32_t*>(box + cypress::sw128_offset(rc.x, rc.y % 64)) =
                cypress::pack2<T>(acc[a][2 * j], acc[a][2 * j + 1]);
          }
        cypress::fence_proxy_async();                                // smem writes -> TMA reads
        cypress::named_sync(1 + cw, 128);
        if (leader) {
#pragma unroll
          for (int a = 0; a < ATOMS; ++a)
#pragma unroll
            for (int b = 0; b < BN / 64; ++b)
              cypress::tma_store_2d(&tmC, myC + (a * (BN / 64) + b) * C_BOX, n0 + 64 * b, m0 + cw * WG_M + 64 * a);
          cypress::tma_store_commit();
        }
      } else {
#pragma unroll
        for (int a = 0; a < ATOMS; ++a) {
          const int row0 = m0 + cw * WG_M + a * 64;
#pragma unroll
          for (int j = 0; j < BN / 4; ++j) {
            const int2 rc = cypress::acc_coord(j);
            const int r = row0 + rc.x, c = n0 + rc.y;                // c even, N % 8 == 0: c+1 < N too
            if (r < M && c < N)
              *reinterpret_cast<uint32_t*>(C + size_t(r) * N + c) = cypress::pack2<T>(acc[a][2 * j], acc[a][2 * j + 1]);
          }
        }
      }
    }
    if constexpr (EPI_TMA) {
      if (leader) cypress::tma_store_wait<0>();                      // smem must outlive the reads
    }
  }
}

// ---- host launcher ------------------------------------------------------------------------------
extern "C" int gemm_launch(const void* A, const void* B, void* C, int M, int N, int K, cudaStream_t stream) {
  if (M < 0 || N < 0 || K < 0 || K % 8 || N % 8) return cudaErrorInvalidValue;  // TMA: 16-byte row strides
  if ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B) | reinterpret_cast<uintptr_t>(C)) & 15)
    return cudaErrorInvalidValue;
  if (M == 0 || N == 0) return cudaSuccess;
  if (K == 0) return cudaMemsetAsync(C, 0, size_t(M) * N * 2, stream);

  CUtensorMap tmA, tmB, tmC;
  cudaError_t e;
  if ((e = cypress::make_tma_map(&tmA, A, IS_BF16, K, M, 1, BK, BM)) != cudaSuccess) return e;
  if ((e = cypress::make_tma_map(&tmB, B, IS_BF16, N, K, 1, 64, BK)) != cudaSuccess) return e;
  if ((e = cypress::make_tma_map(&tmC, C, IS_BF16, N, M, 1, 64, 64)) != cudaSuccess) return e;

  static int configured_device = -1, sms = 0;
  int dev;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
  if (dev != configured_device) {
    if ((e = cudaFuncSetAttribute(gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES)) != cudaSuccess)
      return e;
    if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
    configured_device = dev;
  }
  const int num_tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  const int grid = CYP_PERSISTENT ? (num_tiles < sms ? num_tiles : sms) : num_tiles;
  gemm_kernel<<<grid, THREADS, SMEM_BYTES, stream>>>(tmA, tmB, tmC, static_cast<T*>(C), M, N, K);
  return cudaGetLastError();
}

// Which variant this library is (for the check script's tables).
extern "C" const char* gemm_config() {
  static char buf[160];
  snprintf(buf, sizeof buf, "%s BM=%d BN=%d BK=%d ST=%d CONS=%d G=%d %s %s smem=%d", IS_BF16 ? "bf16" : "f16", BM, BN,
           BK, STAGES, CONSUMERS, GROUP_M, CYP_PERSISTENT ? "persist" : "grid", EPI_TMA ? "epi=tma" : "epi=st", SMEM_BYTES);
  return buf;
}
