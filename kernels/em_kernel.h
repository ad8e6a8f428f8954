/* The portable subset: the one header every kernel in kernels/ includes.
 *
 * The same source must compile with nvcc (11 to 13), NVRTC (which has no
 * system headers), and Debian's clang NVPTX back end without the CUDA headers
 * (-nocudainc, which is what lets clang 14 emit sm_35 PTX with a CUDA 13
 * toolkit it does not know). So kernels use only what this header defines:
 * thread indices, the global/shared/barrier qualifiers, and fixed-size types.
 * No CUDA runtime headers, no templates, no libdevice math. */
#ifndef EM_KERNEL_H
#define EM_KERNEL_H

#if defined(__clang__) && defined(__CUDA__) && !defined(__NVCC__) && !defined(__CUDACC_RTC__)
/* clang -nocudainc: spell out what the CUDA headers would have defined. */
#define EM_GLOBAL extern "C" __attribute__((global))
#define EM_DEVICE static __attribute__((device)) inline
#define EM_SHARED static __attribute__((shared))
#define EM_TID_X ((int)__nvvm_read_ptx_sreg_tid_x())
#define EM_TID_Y ((int)__nvvm_read_ptx_sreg_tid_y())
#define EM_BID_X ((int)__nvvm_read_ptx_sreg_ctaid_x())
#define EM_BID_Y ((int)__nvvm_read_ptx_sreg_ctaid_y())
#define EM_BDIM_X ((int)__nvvm_read_ptx_sreg_ntid_x())
#define EM_BDIM_Y ((int)__nvvm_read_ptx_sreg_ntid_y())
#define EM_GDIM_X ((int)__nvvm_read_ptx_sreg_nctaid_x())
#define EM_SYNC() __syncthreads()
#else
/* nvcc and NVRTC. */
#define EM_GLOBAL extern "C" __global__
#define EM_DEVICE static __device__ __forceinline__
#define EM_SHARED __shared__
#define EM_TID_X ((int)threadIdx.x)
#define EM_TID_Y ((int)threadIdx.y)
#define EM_BID_X ((int)blockIdx.x)
#define EM_BID_Y ((int)blockIdx.y)
#define EM_BDIM_X ((int)blockDim.x)
#define EM_BDIM_Y ((int)blockDim.y)
#define EM_GDIM_X ((int)gridDim.x)
#define EM_SYNC() __syncthreads()
#endif

typedef long long em_i64;

#endif
