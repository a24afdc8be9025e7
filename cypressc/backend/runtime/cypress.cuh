// cypress.cuh — the small Hopper (sm_90a) runtime that cypressc's CUDA lowering calls.
//
// Free functions in namespace `cypress`; every constant is known to the compiler, so the
// only templates are those that carry such constants (wgmma N, element type, wait depth).
// Instruction atoms come from CuTe / CUTLASS (nvidia-cutlass package, headers only);
// inline PTX appears only where those headers have nothing, and says so.
//
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I<cutlass>/include
// No -lcuda: the driver's cuTensorMapEncodeTiled is fetched through the runtime
// (cudaGetDriverEntryPointByVersion), so linking libcudart alone is enough.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <cuda.h>          // CUtensorMap and its enums (types only)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cute/arch/cluster_sm90.hpp>   // cute::elect_one_sync
#include <cute/arch/copy_sm90_desc.hpp> // TMA::CacheHintSm90, prefetch_tma_descriptor
#include <cute/arch/copy_sm90_tma.hpp>  // SM90_TMA_LOAD_2D/3D, SM90_TMA_STORE_2D/3D
#include <cute/arch/mma_sm90_desc.hpp>  // GmmaDescriptor
#include <cute/arch/mma_sm90_gmma.hpp>  // SM90::GMMA::MMA_64xNx16_*, warpgroup_arrive/commit/wait
#include <cute/swizzle.hpp>             // Swizzle<B, M, S>: the TMA/wgmma swizzle as an address map
#if defined(CYP_GMMA_ALL_N)
#include <cute/arch/mma_sm90_gmma_ext.hpp>  // the other N (24, 40, ..., 248): big, so opt-in
#endif
#include <cutlass/arch/barrier.h>       // ClusterBarrier, ClusterTransactionBarrier, NamedBarrier
#include <cutlass/arch/reg_reconfig.h>  // warpgroup_reg_alloc / dealloc (setmaxnreg)

namespace cypress {

using Major = cute::SM90::GMMA::Major;  // K (contiguous along K) or MN (contiguous along M/N)
using bar_t = uint64_t;                 // an mbarrier lives in one 8-byte word of shared memory

// ------------------------------------------------------------------------------------------
// Thread roles
// ------------------------------------------------------------------------------------------

// Index of this thread's warpgroup (4 consecutive warps): selects producer / consumer role.
__device__ __forceinline__ int warpgroup_idx() { return threadIdx.x / 128; }
// Warp index inside the warpgroup, made warp-uniform so branches on it stay uniform.
__device__ __forceinline__ int warp_in_warpgroup() { return __shfl_sync(0xffffffff, (threadIdx.x / 32) % 4, 0); }
// One lane of the calling (converged) warp returns true: the thread that issues TMA / arrives.
__device__ __forceinline__ bool elect_one() { return cute::elect_one_sync() != 0; }

// Producer warpgroup gives registers back so consumers can hold big accumulators.
template <uint32_t R> __device__ __forceinline__ void regs_dealloc() { cutlass::arch::warpgroup_reg_dealloc<R>(); }
// Consumer warpgroup raises its register cap (needs __launch_bounds__(T, 1) on the kernel).
template <uint32_t R> __device__ __forceinline__ void regs_alloc() { cutlass::arch::warpgroup_reg_alloc<R>(); }

// Named barrier among `nthreads` threads (ids 0..7; CUTLASS reserves the hardware ids below).
__device__ __forceinline__ void named_sync(uint32_t id, uint32_t nthreads) { cutlass::arch::NamedBarrier::sync(nthreads, id); }
// Arrive at a named barrier without waiting (the producer side of a named-barrier handoff).
__device__ __forceinline__ void named_arrive(uint32_t id, uint32_t nthreads) { cutlass::arch::NamedBarrier::arrive(nthreads, id); }

// This block's rank in its thread-block cluster (%cluster_ctarank).
__device__ __forceinline__ int cluster_rank() { return int(cute::block_rank_in_cluster()); }
// Every thread of every block of the cluster meets (barrier.cluster arrive.release + wait.acquire).
__device__ __forceinline__ void cluster_sync() { cute::cluster_sync(); }

// Orders this thread's generic-proxy shared writes before later async-proxy (TMA/wgmma) reads.
__device__ __forceinline__ void fence_proxy_async() { cutlass::arch::fence_view_async_shared(); }
// Makes mbarrier.init visible to the async proxy (TMA completes on it) before the block syncs.
__device__ __forceinline__ void fence_barrier_init() { cutlass::arch::fence_barrier_init(); }

// Shared-window address of a generic pointer to shared memory (what descriptors and PTX use).
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return cute::cast_smem_ptr_to_uint(p); }

// ------------------------------------------------------------------------------------------
// mbarrier (phase-parity protocol: a fresh barrier is in phase 0; wait(bar, 1) returns at once)
// ------------------------------------------------------------------------------------------

// Initialise with the number of arrivals that complete one phase (one thread calls this).
__device__ __forceinline__ void init(bar_t* bar, uint32_t count) { cutlass::arch::ClusterBarrier::init(bar, count); }
// Plain arrival (consumer releasing a stage).
__device__ __forceinline__ void arrive(bar_t* bar) { cutlass::arch::ClusterBarrier::arrive(bar); }
// Arrival on `bar`'s stage in every block of the thread-block cluster (blocks 0..N-1): the
// release of a stage that a multicast copy of another block fills (mapa + remote arrive).
template <int N> __device__ __forceinline__ void arrive_cluster(bar_t* bar) {
  #pragma unroll
  for (int i = 0; i < N; ++i) cutlass::arch::ClusterBarrier::arrive(bar, i, 1);
}
// Arrival that also announces `bytes` of TMA traffic the phase must wait for (producer).
__device__ __forceinline__ void arrive_expect_tx(bar_t* bar, uint32_t bytes) {
  cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(bar, bytes);
}
// Spin until the phase with parity `phase` has completed.
__device__ __forceinline__ void wait(bar_t* bar, uint32_t phase) { cutlass::arch::ClusterBarrier::wait(bar, phase); }

// Where a role is in a ring of `Stages` stage buffers, each with its mbarriers (the idea of
// CUTLASS's PipelineState): `index` is the stage of the current step, `phase` the parity of
// the ring's passes so far, the phase a stage's mbarrier completes on this pass.  A role
// advances once per pipeline step; `state + c` is the step c on (or back, for -Stages < c <
// Stages), its phase flipped where the ring wraps in between.  The generated kernel keeps
// one per role (and main loop) across the tiles of a persistent block.
template <int Stages>
struct PipelineState {
  int index = 0, phase = 0;
  __device__ __forceinline__ void advance() {
    if (++index == Stages) { index = 0; phase ^= 1; }
  }
  __device__ __forceinline__ PipelineState operator+(int c) const {
    PipelineState s;
    if (c >= 0) {
      s.index = index + c < Stages ? index + c : index - (Stages - c);
      s.phase = phase ^ (index + c >= Stages);
    } else {
      s.index = index >= -c ? index + c : index + (Stages + c);
      s.phase = phase ^ (index < -c);
    }
    return s;
  }
  __device__ __forceinline__ PipelineState operator-(int c) const { return *this + -c; }
};

// ------------------------------------------------------------------------------------------
// TMA (bulk tensor copies). Host: build a CUtensorMap. Device: issue copies on an mbarrier.
// ------------------------------------------------------------------------------------------

// Fetch cuTensorMapEncodeTiled from the driver once, through the runtime (no -lcuda needed).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (!fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }
  return fn;
}

// Row-major [batch][outer][inner] tensor of 16-bit elements (f16, or bf16 when `bf16`), of
// f32 when `elem_bytes` is 4 (an f32 tensor a TMA reduce-add adds into), or of FP8 when it is 1
// (moved as bytes: TMA never converts, and its out-of-bounds zero is +0 in e4m3 and e5m2), box {box_inner,
// box_outer, 1}, `swizzle`-byte swizzle (128, 64 or 32; box_inner * elem_bytes must be <=
// swizzle: the box's inner extent fits one swizzled row), out-of-bounds elements read as zero.
// `rank` is 2 or 3 and must match the tma_load_2d/3d calls on the map (a 3-D map of batch 1 is
// still 3-D).
inline cudaError_t make_tma_map(CUtensorMap* map, const void* gptr, bool bf16, uint64_t inner, uint64_t outer,
                                uint64_t batch, uint32_t box_inner, uint32_t box_outer, uint32_t rank = 0,
                                uint32_t swizzle = 128, uint32_t elem_bytes = 2) {
  auto encode = tensor_map_encoder();
  const CUtensorMapSwizzle mode = swizzle == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                  : swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                  : CU_TENSOR_MAP_SWIZZLE_32B;
  if (!encode || (swizzle != 128 && swizzle != 64 && swizzle != 32) || (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4) ||
      box_inner * elem_bytes > swizzle || (reinterpret_cast<uintptr_t>(gptr) & 15) || (inner * elem_bytes) % 16)
    return cudaErrorInvalidValue;
  if (rank == 0) rank = batch > 1 ? 3 : 2;
  cuuint64_t dims[3] = {inner, outer, batch};
  cuuint64_t strides[2] = {inner * elem_bytes, inner * outer * elem_bytes};  // bytes, for dims 1..rank-1
  cuuint32_t box[3] = {box_inner, box_outer, 1};
  cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUtensorMapDataType type = elem_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : bf16          ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                   : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUresult r = encode(map, type, cuuint32_t(rank),
                      const_cast<void*>(gptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      mode, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE /* = zeros */);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// A contiguous tensor of `n` elements of `elem_bytes` (4, 2 or 1) as one dimension, box
// {box}: a vector piece of a row at any element offset (a 1-D map has no row stride, so rows of
// any length work; a piece past the row's end reads the next row, past the tensor's end zeros).
// box * elem_bytes must be a multiple of 16, the base 16-byte aligned.
inline cudaError_t make_tma_map_1d(CUtensorMap* map, const void* gptr, uint64_t n, uint32_t box, uint32_t elem_bytes) {
  auto encode = tensor_map_encoder();
  if (!encode || (elem_bytes != 4 && elem_bytes != 2 && elem_bytes != 1) || (box * elem_bytes) % 16 || box > 256 ||
      (reinterpret_cast<uintptr_t>(gptr) & 15))
    return cudaErrorInvalidValue;
  cuuint64_t dims[1] = {n};
  cuuint64_t strides[1] = {0};  // unused at rank 1
  cuuint32_t boxes[1] = {box};
  cuuint32_t elem_strides[1] = {1};
  const CUtensorMapDataType type = elem_bytes == 4   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                                     : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  CUresult r = encode(map, type, 1, const_cast<void*>(gptr), dims, strides, boxes, elem_strides,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE /* = zeros */);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

constexpr uint64_t kEvictNormal = uint64_t(cute::TMA::CacheHintSm90::EVICT_NORMAL);  // default L2 policy

// Pull the tensor map into the descriptor cache early (one thread, before the first copy).
__device__ __forceinline__ void tma_prefetch(const CUtensorMap* map) { cute::prefetch_tma_descriptor(map); }
// Box at element c0 of a 1-D map -> dst; completes its bytes on `bar`.
__device__ __forceinline__ void tma_load_1d(void* dst, const CUtensorMap* map, bar_t* bar, int c0) {
  cute::SM90_TMA_LOAD_1D::copy(map, bar, kEvictNormal, dst, c0);
}
// Box at element coords (c0 = inner, c1 = outer) -> dst; completes `bytes` on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, bar_t* bar, int c0, int c1) {
  cute::SM90_TMA_LOAD_2D::copy(map, bar, kEvictNormal, dst, c0, c1);
}
// Same, for a batched tensor: c2 = batch index.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, bar_t* bar, int c0, int c1, int c2) {
  cute::SM90_TMA_LOAD_3D::copy(map, bar, kEvictNormal, dst, c0, c1, c2);
}
// The same, multicast: the box lands at `dst` and completes on `bar` in every block of the
// cluster whose bit `mask` sets (the same shared offsets in each; .multicast::cluster).
__device__ __forceinline__ void tma_load_1d_multicast(void* dst, const CUtensorMap* map, bar_t* bar, uint16_t mask, int c0) {
  cute::SM90_TMA_LOAD_MULTICAST_1D::copy(map, bar, mask, kEvictNormal, dst, c0);
}
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, bar_t* bar, uint16_t mask, int c0, int c1) {
  cute::SM90_TMA_LOAD_MULTICAST_2D::copy(map, bar, mask, kEvictNormal, dst, c0, c1);
}
__device__ __forceinline__ void tma_load_3d_multicast(void* dst, const CUtensorMap* map, bar_t* bar, uint16_t mask, int c0, int c1, int c2) {
  cute::SM90_TMA_LOAD_MULTICAST_3D::copy(map, bar, mask, kEvictNormal, dst, c0, c1, c2);
}
// Shared box -> global at (c0, c1); out-of-bounds parts are clipped by the hardware.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int c0, int c1) {
  cute::SM90_TMA_STORE_2D::copy(map, src, c0, c1);
}
// Batched store.
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* src, int c0, int c1, int c2) {
  cute::SM90_TMA_STORE_3D::copy(map, src, c0, c1, c2);
}
// Shared box added into global at (c0, c1), element by element (out-of-bounds parts clipped):
// `cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.bulk_group` (PTX ISA 8.0, sm_90;
// CuTe's SM90_TMA_REDUCE_ADD_2D); it completes like a store (commit / wait_group.read).
__device__ __forceinline__ void tma_reduce_add_2d(const CUtensorMap* map, const void* src, int c0, int c1) {
  cute::SM90_TMA_REDUCE_ADD_2D::copy(map, src, c0, c1);
}
// Batched reduce-add.
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, const void* src, int c0, int c1, int c2) {
  cute::SM90_TMA_REDUCE_ADD_3D::copy(map, src, c0, c1, c2);
}
// Close the group of stores issued so far by this thread.
__device__ __forceinline__ void tma_store_commit() { cute::tma_store_arrive(); }
// Wait until at most N store groups still read their shared source (then it may be reused).
template <int N> __device__ __forceinline__ void tma_store_wait() { cute::tma_store_wait<N>(); }

// How many clusters of `cluster` blocks (`threads` threads, `smem` dynamic shared bytes each)
// of `kernel` the device runs at once: a persistent kernel of clusters launches no more (a
// GPC's SMs need not split into whole clusters, so this can be below SMs / cluster).
template <class Kernel>
inline cudaError_t max_active_clusters(int* n, Kernel kernel, int cluster, int threads, int smem) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(cluster, 1, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  const cudaError_t e = cudaOccupancyMaxActiveClusters(n, reinterpret_cast<const void*>(kernel), &cfg);
  if (e != cudaSuccess) return e;
  return *n > 0 ? cudaSuccess : cudaErrorInvalidConfiguration;  // not one cluster fits
}

// ------------------------------------------------------------------------------------------
// Ordered reductions (deterministic: true; pass reduction-order): the blocks along the grid's
// last dimension add into each tile in their order (from the last one down, as the tile walk
// starts them), as FlashAttention-3's deterministic backward does with a semaphore per dQ
// tile.  Each tile (block) of the grid has a progress word in a zeroed workspace: P = x means
// every reduce-add of this block and of the blocks before it in that order into a tile whose
// key (the row-major offset of its origin) is below x has landed in global memory.  A block
// visits its tiles in increasing key order (proved by the pass), so one number says how far
// it has come.
// ------------------------------------------------------------------------------------------
constexpr long long ORDER_DONE = 0x7fffffffffffffffLL;  // the block has added everything
__device__ __forceinline__ long long order_load(const long long* p) {
  long long v;
  asm volatile("ld.acquire.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void order_store(long long* p, long long v) {
  // the bulk adds' writes (async proxy) before the release of the word (generic proxy)
  asm volatile("fence.proxy.async.global;" ::: "memory");
  asm volatile("st.release.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// Before the reduce-add of the tile with `key` (the issuing thread): this block's earlier adds
// have landed (`cp.async.bulk.wait_group 0`, writes done, not only the shared reads), the
// block before it in the order (`pred`, null for the first) has passed the tile, and so
// everything below `key` is done by this block and those before it.
__device__ __forceinline__ void order_enter(long long* mine, const long long* pred, long long key) {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if (pred)
    while (order_load(pred) <= key) {
    }
  order_store(mine, key);
  asm volatile("fence.proxy.async.global;" ::: "memory");  // the adds that follow see the sums
}
// After the block's last reduce-add of its tile: every one has landed, the block before it is
// done, so this one is.
__device__ __forceinline__ void order_finish(long long* mine, const long long* pred) {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if (pred)
    while (order_load(pred) != ORDER_DONE) {
    }
  order_store(mine, ORDER_DONE);
}
// The launcher's workspace of `n` progress words, zeroed on `stream`, from a pool of its own
// that keeps its memory (stream-ordered: CUDA-graph capture records it as a memory node).
inline cudaError_t order_workspace(long long** words, long long n, cudaStream_t stream) {
  static cudaMemPool_t pools[64];
  static std::mutex made;  // two threads' first launches on one device make one pool
  int dev;
  cudaError_t e;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
  if (dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
  std::lock_guard<std::mutex> hold(made);
  if (!pools[dev]) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    cudaMemPool_t pool;
    if ((e = cudaMemPoolCreate(&pool, &props)) != cudaSuccess) return e;
    uint64_t keep = UINT64_MAX;
    if ((e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep)) != cudaSuccess) {
      cudaMemPoolDestroy(pool);
      return e;
    }
    pools[dev] = pool;  // only a pool that keeps its memory
  }
  const size_t bytes = size_t(n) * sizeof(long long);
  if ((e = cudaMallocFromPoolAsync(reinterpret_cast<void**>(words), bytes, pools[dev], stream)) != cudaSuccess) return e;
  if ((e = cudaMemsetAsync(*words, 0, bytes, stream)) != cudaSuccess) cudaFreeAsync(*words, stream);
  return e;
}

// ------------------------------------------------------------------------------------------
// wgmma: shared-memory descriptors, fences, and the m64nNk16 (m64nNk32 for FP8) f32-accumulate call
// ------------------------------------------------------------------------------------------
// Layouts: what a TMA box with SW-byte swizzle (SW = 128, 64 or 32) writes: rows of SW bytes
// (SW / 2 16-bit elements), the XOR pattern repeating every 8 rows (an 8 x SW-byte atom), tile
// base aligned to the atom (1024 / 512 / 256 B) so the descriptor's base offset is 0.  These are
// the canonical layouts of PTX ISA "Asynchronous Warpgroup Level Matrix Shared Memory Layout"
// (CuTe's make_gmma_desc: Layout_{K,MN}_SW{128,64,32}_Atom).
//  * K-major tile  (rows along K, e.g. A: BM x SW/2 per chunk):
//      SBO = 8 * SW B (next group of 8 rows), LBO unused for swizzled K-major (1). A k16 step
//      (k32 of FP8) is 32 B along the row: +32 B on the start address inside a chunk (SW / 32 steps per
//      chunk: 4, 2 or 1), the next chunk after that.
//  * MN-major tile (rows along N, one row per k, e.g. B read from row-major K x N):
//      stored as chunks of SW / 2 columns, each chunk `chunk_bytes` apart (= rows_k * SW B):
//      LBO = chunk_bytes (next SW / 2 columns of N), SBO = 8 * SW B (next 8 k-rows).
//      k16 step: +16 rows * SW B. The instruction gets tnspB = Major::MN.

// Swizzle width in bytes -> the descriptor's layout type (bits 62-63: 1 = 128B, 2 = 64B, 3 = 32B).
template <int SW> __host__ __device__ constexpr cute::SM90::GMMA::LayoutType gmma_layout() {
  static_assert(SW == 128 || SW == 64 || SW == 32, "wgmma swizzles rows of 128, 64 or 32 bytes");
  return SW == 128 ? cute::SM90::GMMA::LayoutType::B128
         : SW == 64 ? cute::SM90::GMMA::LayoutType::B64 : cute::SM90::GMMA::LayoutType::B32;
}
// Descriptor for an SW-byte-swizzled K-major tile starting at `tile`.
template <int SW> __device__ __forceinline__ uint64_t desc_k_sw(const void* tile) {
  cute::GmmaDescriptor d;
  d.bitfield.start_address_ = uint16_t(smem_u32(tile) >> 4);
  d.bitfield.leading_byte_offset_ = 1;
  d.bitfield.stride_byte_offset_ = (8 * SW) >> 4;
  d.bitfield.base_offset_ = 0;
  d.bitfield.layout_type_ = uint8_t(gmma_layout<SW>());
  return d.desc_;
}
// Descriptor for an SW-byte-swizzled MN-major tile made of SW/2-column chunks `chunk_bytes` apart.
template <int SW> __device__ __forceinline__ uint64_t desc_mn_sw(const void* tile, uint32_t chunk_bytes) {
  cute::GmmaDescriptor d;
  d.bitfield.start_address_ = uint16_t(smem_u32(tile) >> 4);
  d.bitfield.leading_byte_offset_ = uint16_t(chunk_bytes >> 4);
  d.bitfield.stride_byte_offset_ = (8 * SW) >> 4;
  d.bitfield.base_offset_ = 0;
  d.bitfield.layout_type_ = uint8_t(gmma_layout<SW>());
  return d.desc_;
}
// The swizzle modes by name, as the generated code calls them (tile base aligned as above).
__device__ __forceinline__ uint64_t desc_k_sw128(const void* tile) { return desc_k_sw<128>(tile); }
__device__ __forceinline__ uint64_t desc_k_sw64(const void* tile) { return desc_k_sw<64>(tile); }
__device__ __forceinline__ uint64_t desc_k_sw32(const void* tile) { return desc_k_sw<32>(tile); }
__device__ __forceinline__ uint64_t desc_mn_sw128(const void* tile, uint32_t chunk_bytes) {
  return desc_mn_sw<128>(tile, chunk_bytes);
}
__device__ __forceinline__ uint64_t desc_mn_sw64(const void* tile, uint32_t chunk_bytes) {
  return desc_mn_sw<64>(tile, chunk_bytes);
}
__device__ __forceinline__ uint64_t desc_mn_sw32(const void* tile, uint32_t chunk_bytes) {
  return desc_mn_sw<32>(tile, chunk_bytes);
}
// Advance a descriptor's start address by `bytes` (multiple of 16): k-slices inside a tile.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// wgmma.fence: register/shared operands written before this point are visible to wgmma.
__device__ __forceinline__ void wgmma_fence() { cute::warpgroup_arrive(); }
// Close the current group of wgmmas (one commit per pipeline stage).
__device__ __forceinline__ void commit() { cute::warpgroup_commit_batch(); }
// Wait until at most N committed wgmma groups are still in flight.
template <int N> __device__ __forceinline__ void wait() { cute::warpgroup_wait<N>(); }
// Compiler-only fence: keeps accumulator reads/writes on their side of async wgmma ops.
template <int R> __device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) cute::warpgroup_fence_operand(d[i]);
}
// The same for a register A operand (packed 16-bit pairs).
template <int R> __device__ __forceinline__ void fence_acc(uint32_t (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) cute::warpgroup_fence_operand(d[i]);
}

// The CuTe atom for (N, element type, major of A, major of B). One line per N below;
// the compiler may emit any N = 8..256 step 8 (define CYP_GMMA_ALL_N for the uncommon ones).
template <int N, class T, Major MA, Major MB> struct gmma_atom;
#define CYP_GMMA_N(N)                                                                              \
  template <Major MA, Major MB> struct gmma_atom<N, __half, MA, MB> {                              \
    using SS = cute::SM90::GMMA::MMA_64x##N##x16_F32F16F16_SS<MA, MB>;                             \
    using RS = cute::SM90::GMMA::MMA_64x##N##x16_F32F16F16_RS<MA, MB>;                             \
  };                                                                                               \
  template <Major MA, Major MB> struct gmma_atom<N, __nv_bfloat16, MA, MB> {                       \
    using SS = cute::SM90::GMMA::MMA_64x##N##x16_F32BF16BF16_SS<MA, MB>;                           \
    using RS = cute::SM90::GMMA::MMA_64x##N##x16_F32BF16BF16_RS<MA, MB>;                           \
  };
CYP_GMMA_N(8) CYP_GMMA_N(16) CYP_GMMA_N(32) CYP_GMMA_N(64)
CYP_GMMA_N(96) CYP_GMMA_N(128) CYP_GMMA_N(192) CYP_GMMA_N(256)
#if defined(CYP_GMMA_ALL_N)
CYP_GMMA_N(24) CYP_GMMA_N(40) CYP_GMMA_N(48) CYP_GMMA_N(56) CYP_GMMA_N(72) CYP_GMMA_N(80)
CYP_GMMA_N(88) CYP_GMMA_N(104) CYP_GMMA_N(112) CYP_GMMA_N(120) CYP_GMMA_N(136) CYP_GMMA_N(144)
CYP_GMMA_N(152) CYP_GMMA_N(160) CYP_GMMA_N(168) CYP_GMMA_N(176) CYP_GMMA_N(184) CYP_GMMA_N(200)
CYP_GMMA_N(208) CYP_GMMA_N(216) CYP_GMMA_N(224) CYP_GMMA_N(232) CYP_GMMA_N(240) CYP_GMMA_N(248)
#endif
#undef CYP_GMMA_N
// FP8 (m64nNk32): both operands K-major only (PTX has no transposed FP8 operand), so any other
// Major leaves gmma_atom undefined and the build fails.  A and B have one type (T).
#define CYP_GMMA_F8(N, T, E)                                                                       \
  template <> struct gmma_atom<N, T, Major::K, Major::K> {                                         \
    using SS = cute::SM90::GMMA::MMA_64x##N##x32_F32##E##E##_SS_TN<>;                               \
    using RS = cute::SM90::GMMA::MMA_64x##N##x32_F32##E##E##_RS_TN<>;                               \
  };
#define CYP_GMMA_F8_N(N) CYP_GMMA_F8(N, __nv_fp8_e4m3, E4M3) CYP_GMMA_F8(N, __nv_fp8_e5m2, E5M2)
CYP_GMMA_F8_N(8) CYP_GMMA_F8_N(16) CYP_GMMA_F8_N(32) CYP_GMMA_F8_N(64)
CYP_GMMA_F8_N(96) CYP_GMMA_F8_N(128) CYP_GMMA_F8_N(192) CYP_GMMA_F8_N(256)
#if defined(CYP_GMMA_ALL_N)
CYP_GMMA_F8_N(24) CYP_GMMA_F8_N(40) CYP_GMMA_F8_N(48) CYP_GMMA_F8_N(56) CYP_GMMA_F8_N(72)
CYP_GMMA_F8_N(80) CYP_GMMA_F8_N(88) CYP_GMMA_F8_N(104) CYP_GMMA_F8_N(112) CYP_GMMA_F8_N(120)
CYP_GMMA_F8_N(136) CYP_GMMA_F8_N(144) CYP_GMMA_F8_N(152) CYP_GMMA_F8_N(160) CYP_GMMA_F8_N(168)
CYP_GMMA_F8_N(176) CYP_GMMA_F8_N(184) CYP_GMMA_F8_N(200) CYP_GMMA_F8_N(208) CYP_GMMA_F8_N(216)
CYP_GMMA_F8_N(224) CYP_GMMA_F8_N(232) CYP_GMMA_F8_N(240) CYP_GMMA_F8_N(248)
#endif
#undef CYP_GMMA_F8_N
#undef CYP_GMMA_F8

namespace detail {
template <class Op, int R, size_t... I>
__device__ __forceinline__ void ss(uint64_t da, uint64_t db, float (&d)[R], bool zero, std::index_sequence<I...>) {
  Op::fma(da, db, d[I]..., zero ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One);
}
template <class Op, int R, size_t... I>
__device__ __forceinline__ void rs(const uint32_t* a, uint64_t db, float (&d)[R], bool zero,
                                   std::index_sequence<I...>) {
  Op::fma(a[0], a[1], a[2], a[3], db, d[I]..., zero ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One);
}
}  // namespace detail

// d(64 x N, f32, wgmma C layout) += A(64x16, smem desc) * B(16xN, smem desc). Warpgroup-wide.
// zero: d = A * B instead (wgmma's scale-d = 0; d's old values are not read).
template <int N, class T, Major MA = Major::K, Major MB = Major::MN>
__device__ __forceinline__ void wgmma(uint64_t desc_a, uint64_t desc_b, float (&d)[N / 2], bool zero = false) {
  detail::ss<typename gmma_atom<N, T, MA, MB>::SS>(desc_a, desc_b, d, zero, std::make_index_sequence<N / 2>{});
}
// Same with A from registers: a[0..3] = 4 x b32 = the 8 elements of one k16 step of a 64 x K
// A fragment per thread, which is the C layout of those 16 columns (see acc_to_a).
template <int N, class T, Major MB = Major::MN>
__device__ __forceinline__ void wgmma_rs(const uint32_t* a, uint64_t desc_b, float (&d)[N / 2], bool zero = false) {
  detail::rs<typename gmma_atom<N, T, Major::K, MB>::RS>(a, desc_b, d, zero, std::make_index_sequence<N / 2>{});
}

// ------------------------------------------------------------------------------------------
// Epilogue helpers
// ------------------------------------------------------------------------------------------

// Two f32 -> one packed pair of 16-bit values (T = __half or __nv_bfloat16), round to nearest.
template <class T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// Two adjacent elements (an even index, so the pair is aligned) read as one load, widened to f32.
template <class T> __device__ __forceinline__ float2 load2(const T* p);
template <> __device__ __forceinline__ float2 load2<float>(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}
template <> __device__ __forceinline__ float2 load2<__half>(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}
template <> __device__ __forceinline__ float2 load2<__nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// Add two adjacent f32 values into global memory (p 8-byte aligned), atomically per element,
// without returning the old values: one vector reduction, `red.global.v2.f32.add` (PTX ISA
// §9.7.13.6 "red": vector types since PTX ISA 8.1, sm_90; .v2/.v4 of .f32 support .add).
__device__ __forceinline__ void red_add2(float* p, float lo, float hi) {
  asm volatile("red.global.v2.f32.add [%0], {%1, %2};" ::"l"(p), "f"(lo), "f"(hi) : "memory");
}

// An f32 accumulator fragment (64 x K, C layout) rounded to the A fragment of a register-sourced
// wgmma: register i of k16 step s packs accumulator pair 4s + i, because the PTX A layout of
// m64nNk16 (rows lane/4 and +8, columns 2*(lane%4) and +8) is the C layout of 16 columns.
template <class T, int R> __device__ __forceinline__ void acc_to_a(const float (&d)[R], uint32_t (&a)[R / 2]) {
#pragma unroll
  for (int i = 0; i < R / 2; ++i) a[i] = pack2<T>(d[2 * i], d[2 * i + 1]);
}

// Where accumulator pair j (= d[2j], d[2j+1]) of an m64nN wgmma lives in the 64 x N tile:
// row = 16*warp + lane/4 + 8*(j%2), col = 8*(j/2) + 2*(lane%4). Returns {row, col}.
__device__ __forceinline__ int2 acc_coord(int j) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  return make_int2(16 * warp + lane / 4 + 8 * (j % 2), 8 * (j / 2) + 2 * (lane % 4));
}

// Byte offset of element (row, col) in a 128B-swizzled box of 64 columns (16-bit elements),
// i.e. where a TMA store with CU_TENSOR_MAP_SWIZZLE_128B expects it. col must be even.
__device__ __forceinline__ uint32_t sw128_offset(int row, int col) {
  return row * 128 + ((((col >> 3) ^ row) & 7) << 4) + ((col & 7) << 1);
}

// Byte offset of 16-bit element (row, col) in one chunk of an SW-byte-swizzled tile (rows of
// SW bytes, as a TMA box with that swizzle writes it): CuTe's Swizzle<log2(SW/16), 4, 3> on
// the byte offset (the 16-byte unit XORed with the row's position in its 1024-byte atom).
template <int SW> __device__ __forceinline__ uint32_t sw_offset(int row, int col) {
  static_assert(SW == 128 || SW == 64 || SW == 32, "TMA / wgmma swizzle rows of 128, 64 or 32 bytes");
  constexpr int B = SW == 128 ? 3 : SW == 64 ? 2 : 1;
  return cute::Swizzle<B, 4, 3>{}(uint32_t(row * SW + col * 2));
}

// Two 16-bit values packed in a word, as f32.
template <class T> __device__ __forceinline__ float2 to_float2(uint32_t w);
template <> __device__ __forceinline__ float2 to_float2<__half>(uint32_t w) {
  return __half22float2(*reinterpret_cast<const __half2*>(&w));
}
template <> __device__ __forceinline__ float2 to_float2<__nv_bfloat16>(uint32_t w) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
}

// Sum, in f32, of row `row` of a shared tile stored as `chunks` 64-column chunks of 16-bit
// elements, 128B-swizzled as TMA wrote them, `chunk_bytes` apart.  One thread reads its row
// with 16-byte loads; the XOR swizzle spreads the 8 rows of a 1024-byte atom over all banks.
template <class T>
__device__ __forceinline__ float sw128_row_sum(const uint8_t* tile, int row, int chunks, int chunk_bytes) {
  float s0 = 0.f, s1 = 0.f;
  for (int c = 0; c < chunks; ++c) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const uint4 v = *reinterpret_cast<const uint4*>(tile + c * chunk_bytes + sw128_offset(row, 8 * q));
      const float2 a = to_float2<T>(v.x), b = to_float2<T>(v.y), e = to_float2<T>(v.z), d = to_float2<T>(v.w);
      s0 += (a.x + a.y) + (b.x + b.y);
      s1 += (e.x + e.y) + (d.x + d.y);
    }
  }
  return s0 + s1;
}

// ------------------------------------------------------------------------------------------
// Accumulator rows (the online softmax of FlashAttention).  Element i of a thread's m64nN f32
// fragment lies in row (i / 2) % 2 of its two rows (acc_coord); the 4 lanes of a quad (equal
// lane / 4) hold the rest of those rows, so a row reduction ends with two xor-shuffles.  A
// per-row vector is float[2] per atom: the thread's two rows, equal across the quad.
// ------------------------------------------------------------------------------------------
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// m[h] = max(m[h], max of row h)
template <int R> __device__ __forceinline__ void warpgroup_row_max(float (&m)[2], const float (&x)[R]) {
  float v[2] = {x[0], x[2]};
#pragma unroll
  for (int i = 0; i < R; ++i) v[(i / 2) % 2] = fmaxf(v[(i / 2) % 2], x[i]);
  m[0] = fmaxf(m[0], quad_max(v[0]));
  m[1] = fmaxf(m[1], quad_max(v[1]));
}
// l[h] += sum of row h
template <int R> __device__ __forceinline__ void warpgroup_row_sum(float (&l)[2], const float (&x)[R]) {
  float v[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < R; ++i) v[(i / 2) % 2] += x[i];
  l[0] += quad_sum(v[0]);
  l[1] += quad_sum(v[1]);
}
// l[h] += this thread's part of row h: the quad's other 3 lanes hold the rest, summed by
// quad_reduce where l is first read (cypressc's defer_row_sums)
template <int R> __device__ __forceinline__ void warpgroup_row_sum_partial(float (&l)[2], const float (&x)[R]) {
  float v[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < R; ++i) v[(i / 2) % 2] += x[i];
  l[0] += v[0];
  l[1] += v[1];
}
__device__ __forceinline__ void quad_reduce(float (&v)[2]) {
  v[0] = quad_sum(v[0]);
  v[1] = quad_sum(v[1]);
}
// x = exp2((x - m[row]) * scale) as one FFMA + EX2; a row whose max is -inf subtracts 0
__device__ __forceinline__ float exp2_offset(float m, float scale) { return m == -INFINITY ? 0.f : m * scale; }
template <int R> __device__ __forceinline__ void exp2_diff(float (&x)[R], const float (&m)[2], float scale) {
  const float o[2] = {exp2_offset(m[0], scale), exp2_offset(m[1], scale)};
#pragma unroll
  for (int i = 0; i < R; ++i) x[i] = ex2(fmaf(x[i], scale, -o[(i / 2) % 2]));
}
__device__ __forceinline__ void exp2_diff_vec(float (&x)[2], const float (&m)[2], float scale) {
  x[0] = ex2(fmaf(x[0], scale, -exp2_offset(m[0], scale)));
  x[1] = ex2(fmaf(x[1], scale, -exp2_offset(m[1], scale)));
}
template <int R> __device__ __forceinline__ void scale_rows(float (&x)[R], const float (&v)[2]) {
#pragma unroll
  for (int i = 0; i < R; ++i) x[i] *= v[(i / 2) % 2];
}
__device__ __forceinline__ void scale_vec(float (&x)[2], const float (&v)[2]) { x[0] *= v[0]; x[1] *= v[1]; }
template <int R> __device__ __forceinline__ void div_rows(float (&x)[R], const float (&v)[2]) {
  const float r[2] = {1.f / v[0], 1.f / v[1]};
#pragma unroll
  for (int i = 0; i < R; ++i) x[i] *= r[(i / 2) % 2];
}
__device__ __forceinline__ void div_vec(float (&x)[2], const float (&v)[2]) { x[0] /= v[0]; x[1] /= v[1]; }
// Masks: element i of the fragment lies in column 8 (i / 4) + 2 (lane % 4) + i % 2 of the
// atom's N = 2R columns and in row 16 warp + lane / 4 + 8 ((i / 2) % 2) of its 64.  Each
// returns at once when nothing can be masked (the branch is uniform over the warpgroup), so
// only a ragged last tile or a causal diagonal tile pays for the compares.
template <int R> __device__ __forceinline__ void mask_columns(float (&x)[R], int n) {
  if (n >= 2 * R) return;
  const int c0 = 2 * (threadIdx.x % 4);
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (8 * (i / 4) + c0 + i % 2 >= n) x[i] = -INFINITY;
}
template <int R> __device__ __forceinline__ void mask_causal(float (&x)[R], int d) {
  if (d >= 2 * R - 1) return;
  const int lane = threadIdx.x % 32, r0 = 16 * ((threadIdx.x / 32) % 4) + lane / 4 + d, c0 = 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (8 * (i / 4) + c0 + i % 2 > r0 + 8 * ((i / 2) % 2)) x[i] = -INFINITY;
}
// the transposed tile (rows are keys, columns queries, d = first key row - first query column):
// -inf where the column comes before the row's diagonal, c < r + d
template <int R> __device__ __forceinline__ void mask_causal_t(float (&x)[R], int d) {
  if (d <= -63) return;
  const int lane = threadIdx.x % 32, r0 = 16 * ((threadIdx.x / 32) % 4) + lane / 4 + d, c0 = 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (8 * (i / 4) + c0 + i % 2 < r0 + 8 * ((i / 2) % 2)) x[i] = -INFINITY;
}
// lse = m * scale + ln(l): the natural log-sum-exp of a row from its max and its exp2 sum
__device__ __forceinline__ void row_log_sum_exp(float (&lse)[2], const float (&m)[2], const float (&l)[2],
                                                float scale) {
  lse[0] = fmaf(m[0], scale, __logf(l[0]));
  lse[1] = fmaf(m[1], scale, __logf(l[1]));
}

// Round a shared pointer up to `align` bytes (swizzled TMA/wgmma tiles need 1024).
__device__ __forceinline__ uint8_t* align_smem(uint8_t* p, uint32_t align) {
  uint32_t a = smem_u32(p);
  return p + ((align - (a % align)) % align);
}

}  // namespace cypress
