/* The portable subset: the one header every kernel in kernels/ includes.
 *
 * The same source must compile with nvcc (11 to 13), NVRTC (which has no
 * system headers), Debian's clang NVPTX back end without the CUDA headers
 * (-nocudainc, which is what lets clang 14 emit sm_35 PTX with a CUDA 13
 * toolkit it does not know), and the host C compiler: the test double of
 * libcuda (tests/fakecuda) runs every kernel on the CPU from its host build.
 * So kernels use only what this header defines: thread indices, the
 * global/shared/barrier qualifiers, and fixed-size types. No CUDA runtime
 * headers, no templates, no libdevice math.
 *
 * Launch geometry: EM_TID_{X,Y,Z} (thread in block), EM_BID_{X,Y,Z} (block in
 * grid), EM_BDIM_{X,Y,Z} (block size), EM_GDIM_{X,Y,Z} (grid size).
 * Memory: EM_SHARED for a block's static shared arrays, EM_DYNAMIC_SHARED(type,
 * name) for the launch's dynamic shared memory (one per kernel). EM_SYNC() is
 * the block barrier (__syncthreads).
 *
 * Device addresses stored in device memory (a table a multi-tensor kernel
 * reads: kernels/learner.cu) are 64-bit integers (em_i64), written by the
 * host from the device pointers it holds. EM_DEVICE_ADDR(type, entry) turns
 * such an entry, an lvalue, into a `type *`: a plain cast on the GPU; in
 * the host build a call into the test double, which translates the address
 * to the host memory behind it (and checks it) as it does pointer
 * parameters. Always read a stored address through it: a cast of your own
 * works on a GPU and crashes the double. */
#ifndef EM_KERNEL_H
#define EM_KERNEL_H

typedef long long em_i64;

#if defined(__clang__) && defined(__CUDA__) && !defined(__NVCC__) && !defined(__CUDACC_RTC__)
/* clang -nocudainc: spell out what the CUDA headers would have defined. */
#define EM_GLOBAL extern "C" __attribute__((global))
#define EM_DEVICE static __attribute__((device)) inline
#define EM_SHARED static __attribute__((shared))
#define EM_DYNAMIC_SHARED(type, name) extern __attribute__((shared)) type name[]
#define EM_TID_X ((int)__nvvm_read_ptx_sreg_tid_x())
#define EM_TID_Y ((int)__nvvm_read_ptx_sreg_tid_y())
#define EM_TID_Z ((int)__nvvm_read_ptx_sreg_tid_z())
#define EM_BID_X ((int)__nvvm_read_ptx_sreg_ctaid_x())
#define EM_BID_Y ((int)__nvvm_read_ptx_sreg_ctaid_y())
#define EM_BID_Z ((int)__nvvm_read_ptx_sreg_ctaid_z())
#define EM_BDIM_X ((int)__nvvm_read_ptx_sreg_ntid_x())
#define EM_BDIM_Y ((int)__nvvm_read_ptx_sreg_ntid_y())
#define EM_BDIM_Z ((int)__nvvm_read_ptx_sreg_ntid_z())
#define EM_GDIM_X ((int)__nvvm_read_ptx_sreg_nctaid_x())
#define EM_GDIM_Y ((int)__nvvm_read_ptx_sreg_nctaid_y())
#define EM_GDIM_Z ((int)__nvvm_read_ptx_sreg_nctaid_z())
#define EM_SYNC() __syncthreads()
#define EM_DEVICE_ADDR(type, entry) ((type *)(entry))

#elif defined(__CUDACC__)
/* nvcc and NVRTC. */
#define EM_GLOBAL extern "C" __global__
#define EM_DEVICE static __device__ __forceinline__
#define EM_SHARED __shared__
#define EM_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#define EM_TID_X ((int)threadIdx.x)
#define EM_TID_Y ((int)threadIdx.y)
#define EM_TID_Z ((int)threadIdx.z)
#define EM_BID_X ((int)blockIdx.x)
#define EM_BID_Y ((int)blockIdx.y)
#define EM_BID_Z ((int)blockIdx.z)
#define EM_BDIM_X ((int)blockDim.x)
#define EM_BDIM_Y ((int)blockDim.y)
#define EM_BDIM_Z ((int)blockDim.z)
#define EM_GDIM_X ((int)gridDim.x)
#define EM_GDIM_Y ((int)gridDim.y)
#define EM_GDIM_Z ((int)gridDim.z)
#define EM_SYNC() __syncthreads()
#define EM_DEVICE_ADDR(type, entry) ((type *)(entry))

#else
/* Host C: the build the test double of libcuda runs (tests/fakecuda,
 * fakecuda_exec.c). Each thread of a block is a fiber; the double sets
 * em_host_thread before it switches to one, and EM_SYNC() switches back to
 * the block's scheduler until every thread of the block has arrived.
 * Blocks run one at a time, so a block's shared arrays can be plain statics:
 * they live in the section em_shared, which the double fills with a NaN
 * pattern before each block (shared memory starts undefined on a GPU). */
typedef struct em_host_thread_state {
  int tid[3], bid[3], bdim[3], gdim[3];
  void *dynamic_shared; /* the launch's dynamic shared memory, per block */
} em_host_thread_state;
extern const em_host_thread_state *em_host_thread;
/* `site` names the EM_SYNC() in the source (__COUNTER__ is unique per use
 * in a file): the double tells barriers apart by it, never by the call's
 * return address, because the compiler may duplicate one EM_SYNC() into
 * several call sites (jump threading on a thread-dependent condition) or
 * merge several into one. */
void em_host_sync(int site);
/* EM_DEVICE_ADDR's host form: the host address behind the device address
 * stored at *entry (NULL for 0), translated against the launch's context.
 * An address the double cannot translate (freed memory, a host pointer,
 * another device's memory, no allocation) does not return: the thread stops
 * there and the launch fails with CUDA_ERROR_ILLEGAL_ADDRESS and a message
 * naming the kernel, the entry (where, in which parameter's memory, it was
 * read) and why. After the launch the guard zones of every allocation
 * reached this way are checked, as those of pointer parameters are. */
void *em_host_device_addr(const em_i64 *entry);

#ifdef EM_LIST_KERNELS
/* build-tools/kernel_wrappers.sh finds kernels by this marker. */
#define EM_GLOBAL em_kernel_marker
#else
/* Hidden: kernel names (em_fill_f32 ...) are also public functions of
 * libember, and the double must never bind to those. */
#define EM_GLOBAL __attribute__((visibility("hidden")))
#endif
#define EM_DEVICE static inline
#define EM_SHARED static __attribute__((section("em_shared"), aligned(16)))
#define EM_DYNAMIC_SHARED(type, name) type *name = (type *)em_host_thread->dynamic_shared
#define EM_TID_X (em_host_thread->tid[0])
#define EM_TID_Y (em_host_thread->tid[1])
#define EM_TID_Z (em_host_thread->tid[2])
#define EM_BID_X (em_host_thread->bid[0])
#define EM_BID_Y (em_host_thread->bid[1])
#define EM_BID_Z (em_host_thread->bid[2])
#define EM_BDIM_X (em_host_thread->bdim[0])
#define EM_BDIM_Y (em_host_thread->bdim[1])
#define EM_BDIM_Z (em_host_thread->bdim[2])
#define EM_GDIM_X (em_host_thread->gdim[0])
#define EM_GDIM_Y (em_host_thread->gdim[1])
#define EM_GDIM_Z (em_host_thread->gdim[2])
#define EM_SYNC() em_host_sync(__COUNTER__)
#define EM_DEVICE_ADDR(type, entry) ((type *)em_host_device_addr(&(entry)))
#endif

#endif
