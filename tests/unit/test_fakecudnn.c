/* The test double of cuDNN (tests/fakecudnn/README.md) on the libcuda
 * double: versions and devices it refuses, descriptors and their rules,
 * convolutions in every direction with every algorithm against plain
 * references written here (several geometries: groups, dilation, strides,
 * padding, 1-D / 3-D, NHWC, convolution vs cross-correlation, f32 / f64 /
 * f16 / bf16), alpha and beta, the algorithm search and its workspace
 * limits, math types, pooling, batch normalisation against hand-derived
 * formulas, stream order, operands out of bounds, fault injection, cuDNN
 * 8's numbering and descriptor leaks.
 *
 * The double is loaded from $FAKECUDNN_LIB (build-tools/run_tests.sh), the
 * libcuda double through tests/support/fake_driver.c; without either, every
 * test skips. The cuDNN signatures below are written from cudnn_*_v9.h. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cmocka.h needs setjmp.h, stdarg.h and stddef.h first. */
#include <cmocka.h>

#include "conv_reference.h"
#include "fake_driver.h"
#include "fakecudnn/fakecudnn.h"
#include "run_self.h"

/* ------------------------------------------------------------ the ABI --- */

typedef int st_t;
typedef void *hnd_t, *tdesc_t, *fdesc_t, *cdesc_t, *pdesc_t;

/* cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t (cudnn_cnn_v9.h). */
typedef struct perf_t {
  int algo;
  st_t status;
  float time;
  size_t memory;
  int determinism;
  int mathType;
  int reserved[3];
} perf_t;

enum { S_OK = 0, S_NOT_INIT = 1001, S_BAD = 2000, S_NULL = 2002, S_SIZE = 2006, S_NOTSUP = 3000, S_NOTSUP_TYPE = 3003,
       S_DRIVER = 3005, S_ARCH = 3007, S_ALLOC = 4003, S_EXEC_DRIVER = 5001 };
enum { FLOAT = 0, DOUBLE = 1, HALF = 2, BF16 = 9 };
enum { NCHW = 0, NHWC = 1 };
enum { CONV = 0, XCORR = 1 };
enum { DEFAULT_MATH = 0, TENSOR_OP = 1, ALLOW_CONVERSION = 2, FMA = 3 };
enum { POOL_MAX = 0, POOL_AVG_INC = 1, POOL_AVG_EXC = 2, POOL_MAX_DET = 3 };
enum { BN_PER_ACT = 0, BN_SPATIAL = 1 };
enum { FWD, BWD_DATA, BWD_FILTER };

static struct dnn {
  void *lib;
  size_t (*GetVersion)(void);
  size_t (*GetCudartVersion)(void);
  const char *(*GetErrorString)(st_t);
  st_t (*Create)(hnd_t *);
  st_t (*Destroy)(hnd_t);
  st_t (*SetStream)(hnd_t, CUstream);
  st_t (*GetStream)(hnd_t, CUstream *);
  st_t (*CreateTensor)(tdesc_t *);
  st_t (*SetTensor4d)(tdesc_t, int, int, int, int, int, int);
  st_t (*SetTensor4dEx)(tdesc_t, int, int, int, int, int, int, int, int, int);
  st_t (*SetTensorNd)(tdesc_t, int, int, const int *, const int *);
  st_t (*SetTensorNdEx)(tdesc_t, int, int, int, const int *);
  st_t (*GetTensorNd)(tdesc_t, int, int *, int *, int *, int *);
  st_t (*TensorBytes)(tdesc_t, size_t *);
  st_t (*DestroyTensor)(tdesc_t);
  st_t (*CreateFilter)(fdesc_t *);
  st_t (*SetFilter4d)(fdesc_t, int, int, int, int, int, int);
  st_t (*SetFilterNd)(fdesc_t, int, int, int, const int *);
  st_t (*DestroyFilter)(fdesc_t);
  st_t (*CreateConv)(cdesc_t *);
  st_t (*SetConv2d)(cdesc_t, int, int, int, int, int, int, int, int);
  st_t (*SetConvNd)(cdesc_t, int, const int *, const int *, const int *, int, int);
  st_t (*SetGroups)(cdesc_t, int);
  st_t (*SetMath)(cdesc_t, int);
  st_t (*ConvOutDim)(cdesc_t, tdesc_t, fdesc_t, int, int *);
  st_t (*DestroyConv)(cdesc_t);
  st_t (*FwdMax)(hnd_t, int *);
  st_t (*FwdV7)(hnd_t, tdesc_t, fdesc_t, cdesc_t, tdesc_t, int, int *, perf_t *);
  st_t (*FwdFind)(hnd_t, tdesc_t, const void *, fdesc_t, const void *, cdesc_t, tdesc_t, void *, int, int *, perf_t *,
                  void *, size_t);
  st_t (*FwdWs)(hnd_t, tdesc_t, fdesc_t, cdesc_t, tdesc_t, int, size_t *);
  st_t (*Fwd)(hnd_t, const void *, tdesc_t, const void *, fdesc_t, const void *, cdesc_t, int, void *, size_t,
              const void *, tdesc_t, void *);
  st_t (*DataV7)(hnd_t, fdesc_t, tdesc_t, cdesc_t, tdesc_t, int, int *, perf_t *);
  st_t (*DataFind)(hnd_t, fdesc_t, const void *, tdesc_t, const void *, cdesc_t, tdesc_t, void *, int, int *, perf_t *,
                   void *, size_t);
  st_t (*DataWs)(hnd_t, fdesc_t, tdesc_t, cdesc_t, tdesc_t, int, size_t *);
  st_t (*Data)(hnd_t, const void *, fdesc_t, const void *, tdesc_t, const void *, cdesc_t, int, void *, size_t,
               const void *, tdesc_t, void *);
  st_t (*FilterV7)(hnd_t, tdesc_t, tdesc_t, cdesc_t, fdesc_t, int, int *, perf_t *);
  st_t (*FilterFind)(hnd_t, tdesc_t, const void *, tdesc_t, const void *, cdesc_t, fdesc_t, void *, int, int *,
                     perf_t *, void *, size_t);
  st_t (*FilterWs)(hnd_t, tdesc_t, tdesc_t, cdesc_t, fdesc_t, int, size_t *);
  st_t (*Filter)(hnd_t, const void *, tdesc_t, const void *, tdesc_t, const void *, cdesc_t, int, void *, size_t,
                 const void *, fdesc_t, void *);
  st_t (*Bias)(hnd_t, const void *, tdesc_t, const void *, const void *, tdesc_t, void *);
  st_t (*CreatePool)(pdesc_t *);
  st_t (*SetPoolNd)(pdesc_t, int, int, int, const int *, const int *, const int *);
  st_t (*PoolOutDim)(pdesc_t, tdesc_t, int, int *);
  st_t (*DestroyPool)(pdesc_t);
  st_t (*PoolFwd)(hnd_t, pdesc_t, const void *, tdesc_t, const void *, const void *, tdesc_t, void *);
  st_t (*PoolBwd)(hnd_t, pdesc_t, const void *, tdesc_t, const void *, tdesc_t, const void *, tdesc_t, const void *,
                  const void *, tdesc_t, void *);
  st_t (*DeriveBN)(tdesc_t, tdesc_t, int);
  st_t (*BNTrain)(hnd_t, int, const void *, const void *, tdesc_t, const void *, tdesc_t, void *, tdesc_t, const void *,
                  const void *, double, void *, void *, double, void *, void *);
  st_t (*BNInfer)(hnd_t, int, const void *, const void *, tdesc_t, const void *, tdesc_t, void *, tdesc_t, const void *,
                  const void *, const void *, const void *, double);
  st_t (*BNBack)(hnd_t, int, const void *, const void *, const void *, const void *, tdesc_t, const void *, tdesc_t,
                 const void *, tdesc_t, void *, tdesc_t, const void *, void *, void *, double, const void *,
                 const void *);
  st_t (*SetTensorValue)(hnd_t, tdesc_t, void *, const void *);
  st_t (*AddTensor)(hnd_t, const void *, tdesc_t, const void *, const void *, tdesc_t, void *);
  fakecudnn_call_count_fn call_count;
  fakecudnn_reset_fn reset;
  fakecudnn_text_fn last_call, last_error, config_error;
  fakecudnn_count_fn live_handles, live_descriptors;
} dn;

static int bind(void *lib, void **slot, const char *name) {
  *slot = dlsym(lib, name);
  if (!*slot) fprintf(stderr, "test_fakecudnn: %s does not export %s\n", getenv("FAKECUDNN_LIB"), name);
  return *slot != NULL;
}

#define B(field, name) bind(dn.lib, (void **)&dn.field, name)

static int bind_all(void) {
  return B(GetVersion, "cudnnGetVersion") & B(GetCudartVersion, "cudnnGetCudartVersion") &
         B(GetErrorString, "cudnnGetErrorString") & B(Create, "cudnnCreate") & B(Destroy, "cudnnDestroy") &
         B(SetStream, "cudnnSetStream") & B(GetStream, "cudnnGetStream") &
         B(CreateTensor, "cudnnCreateTensorDescriptor") & B(SetTensor4d, "cudnnSetTensor4dDescriptor") &
         B(SetTensor4dEx, "cudnnSetTensor4dDescriptorEx") & B(SetTensorNd, "cudnnSetTensorNdDescriptor") & B(SetTensorNdEx, "cudnnSetTensorNdDescriptorEx") &
         B(GetTensorNd, "cudnnGetTensorNdDescriptor") & B(TensorBytes, "cudnnGetTensorSizeInBytes") &
         B(DestroyTensor, "cudnnDestroyTensorDescriptor") & B(CreateFilter, "cudnnCreateFilterDescriptor") &
         B(SetFilter4d, "cudnnSetFilter4dDescriptor") & B(SetFilterNd, "cudnnSetFilterNdDescriptor") &
         B(DestroyFilter, "cudnnDestroyFilterDescriptor") & B(CreateConv, "cudnnCreateConvolutionDescriptor") &
         B(SetConv2d, "cudnnSetConvolution2dDescriptor") & B(SetConvNd, "cudnnSetConvolutionNdDescriptor") &
         B(SetGroups, "cudnnSetConvolutionGroupCount") & B(SetMath, "cudnnSetConvolutionMathType") &
         B(ConvOutDim, "cudnnGetConvolutionNdForwardOutputDim") &
         B(DestroyConv, "cudnnDestroyConvolutionDescriptor") &
         B(FwdMax, "cudnnGetConvolutionForwardAlgorithmMaxCount") &
         B(FwdV7, "cudnnGetConvolutionForwardAlgorithm_v7") & B(FwdFind, "cudnnFindConvolutionForwardAlgorithmEx") &
         B(FwdWs, "cudnnGetConvolutionForwardWorkspaceSize") & B(Fwd, "cudnnConvolutionForward") &
         B(DataV7, "cudnnGetConvolutionBackwardDataAlgorithm_v7") &
         B(DataFind, "cudnnFindConvolutionBackwardDataAlgorithmEx") &
         B(DataWs, "cudnnGetConvolutionBackwardDataWorkspaceSize") & B(Data, "cudnnConvolutionBackwardData") &
         B(FilterV7, "cudnnGetConvolutionBackwardFilterAlgorithm_v7") &
         B(FilterFind, "cudnnFindConvolutionBackwardFilterAlgorithmEx") &
         B(FilterWs, "cudnnGetConvolutionBackwardFilterWorkspaceSize") & B(Filter, "cudnnConvolutionBackwardFilter") &
         B(Bias, "cudnnConvolutionBackwardBias") & B(CreatePool, "cudnnCreatePoolingDescriptor") &
         B(SetPoolNd, "cudnnSetPoolingNdDescriptor") & B(PoolOutDim, "cudnnGetPoolingNdForwardOutputDim") &
         B(DestroyPool, "cudnnDestroyPoolingDescriptor") & B(PoolFwd, "cudnnPoolingForward") &
         B(PoolBwd, "cudnnPoolingBackward") & B(DeriveBN, "cudnnDeriveBNTensorDescriptor") &
         B(BNTrain, "cudnnBatchNormalizationForwardTraining") &
         B(BNInfer, "cudnnBatchNormalizationForwardInference") & B(BNBack, "cudnnBatchNormalizationBackward") &
         B(SetTensorValue, "cudnnSetTensor") & B(AddTensor, "cudnnAddTensor") &
         B(call_count, "fakecudnn_call_count") & B(reset, "fakecudnn_reset") & B(last_call, "fakecudnn_last_call") &
         B(last_error, "fakecudnn_last_error") & B(config_error, "fakecudnn_config_error") &
         B(live_handles, "fakecudnn_live_handles") & B(live_descriptors, "fakecudnn_live_descriptors");
}

static int group_setup(void **state) {
  if (fake_group_setup(state) != 0) return -1;
  const char *path = getenv("FAKECUDNN_LIB");
  if (!fk.handle || !path || !*path) {
    fprintf(stderr, "test_fakecudnn: FAKECUDA_LIB or FAKECUDNN_LIB is not set; skipping\n");
    return 0;
  }
  dn.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dn.lib) {
    fprintf(stderr, "test_fakecudnn: cannot load %s: %s\n", path, dlerror());
    return -1;
  }
  return bind_all() ? 0 : -1;
}

static int group_teardown(void **state) {
  if (dn.lib) {
    dn.reset();
    dlclose(dn.lib);
  }
  return fake_group_teardown(state);
}

static const char *const dnn_vars[] = {"FAKECUDNN_VERSION", "FAKECUDNN_CUDART", "FAKECUDNN_FAIL", "NVIDIA_TF32_OVERRIDE"};

static int test_setup(void **state) {
  fake_test_setup(state);
  for (size_t i = 0; i < sizeof dnn_vars / sizeof dnn_vars[0]; i++) unsetenv(dnn_vars[i]);
  if (dn.lib) dn.reset();
  return 0;
}

/* Every test ends with nothing of the double's left alive. */
static int test_teardown(void **state) {
  (void)state;
  if (dn.lib) {
    size_t h = dn.live_handles(), d = dn.live_descriptors();
    dn.reset();
    if (h || d) fprintf(stderr, "test_fakecudnn: the test left %zu handles and %zu descriptors\n", h, d);
    assert_int_equal(h + d, 0);
  }
  return 0;
}

#define NEED()                          \
  do {                                  \
    if (!fk.handle || !dn.lib) skip();  \
  } while (0)

/* ------------------------------------------------------------ helpers --- */

/* A pretend GPU of compute capability cc ("9.0") with its context current,
 * and a handle on it. */
static hnd_t up(const char *cc) {
  assert_int_equal(fake_init_with(cc, NULL), CUDA_SUCCESS);
  fake_use_device(0);
  hnd_t h = NULL;
  assert_int_equal(dn.Create(&h), S_OK);
  return h;
}

static CUdeviceptr dalloc(size_t bytes) {
  CUdeviceptr p = 0;
  assert_int_equal(fk.MemAlloc(&p, bytes), CUDA_SUCCESS);
  return p;
}

static void *P(CUdeviceptr p) { return (void *)(uintptr_t)p; }

static void dfree(CUdeviceptr p) { assert_int_equal(fk.MemFree(p), CUDA_SUCCESS); }

static void download(void *host, CUdeviceptr p, size_t bytes) { assert_int_equal(fk.MemcpyDtoH(host, p, bytes), CUDA_SUCCESS); }

/* Deterministic values in [-1, 1) from a seed and an index. */
static double value_at(unsigned seed, long i) {
  unsigned long x = (unsigned long)seed * 2654435761UL + (unsigned long)i * 40503UL + 12345UL;
  x ^= x >> 13;
  x *= 0x5bd1e995UL;
  x ^= x >> 15;
  return (double)(x % 2000) / 1000.0 - 1.0;
}

static double *values(unsigned seed, long n) {
  double *v = malloc((size_t)n * sizeof *v);
  assert_non_null(v);
  for (long i = 0; i < n; i++) v[i] = value_at(seed, i);
  return v;
}

/* f16 / bf16 bits of a double, written here (not the double's code): by
 * bit manipulation of the f32 value, round to nearest even. */
static uint16_t to_half_bits(double d) {
  float f = (float)d;
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000, exp = (u >> 23) & 0xff, man = u & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000;
    int shift = 14 - e;
    uint32_t h = man >> shift, rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (man >> 13), rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

static double from_half_bits(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, e - 25);
  return (h & 0x8000) ? -v : v;
}

static uint16_t to_bf16_bits(double d) {
  float f = (float)d;
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static double from_bf16_bits(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* TF32 of an f32 value: keep 10 mantissa bits, round to nearest even. */
static double tf32(double d) {
  float f = (float)d;
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0xfff + ((u >> 13) & 1);
  u &= ~0x1fffu;
  memcpy(&f, &u, 4);
  return f;
}

static size_t esize(int dtype) { return dtype == DOUBLE ? 8 : dtype == FLOAT ? 4 : 2; }

static void put_elem(unsigned char *buf, int dtype, long i, double v) {
  if (dtype == DOUBLE) memcpy(buf + i * 8, &v, 8);
  else if (dtype == FLOAT) {
    float f = (float)v;
    memcpy(buf + i * 4, &f, 4);
  } else {
    uint16_t h = dtype == HALF ? to_half_bits(v) : to_bf16_bits(v);
    memcpy(buf + i * 2, &h, 2);
  }
}

static double get_elem(const unsigned char *buf, int dtype, long i) {
  if (dtype == DOUBLE) {
    double d;
    memcpy(&d, buf + i * 8, 8);
    return d;
  }
  if (dtype == FLOAT) {
    float f;
    memcpy(&f, buf + i * 4, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, buf + i * 2, 2);
  return dtype == HALF ? from_half_bits(h) : from_bf16_bits(h);
}

/* A logical tensor (row-major over dims) in device memory with strides. */
typedef struct dt {
  int nb, dtype;
  int dims[5], strides[5];
  long count, span;
  CUdeviceptr p;
} dt;

static long physical(const dt *t, long logical) {
  long off = 0;
  for (int i = t->nb - 1; i >= 0; i--) {
    off += (logical % t->dims[i]) * t->strides[i];
    logical /= t->dims[i];
  }
  return off;
}

/* Packed strides: NCHW row-major, NHWC with the channel innermost. */
static void strides_for(int nb, const int *dims, int nhwc, int *strides) {
  int s = 1;
  if (nhwc) {
    strides[1] = s;
    s *= dims[1];
    for (int i = nb - 1; i >= 2; i--) strides[i] = s, s *= dims[i];
    strides[0] = s;
  } else {
    for (int i = nb - 1; i >= 0; i--) strides[i] = s, s *= dims[i];
  }
}

static dt make_dt(int nb, const int *dims, int nhwc, int dtype) {
  dt t = {.nb = nb, .dtype = dtype};
  t.count = 1;
  for (int i = 0; i < nb; i++) t.dims[i] = dims[i], t.count *= dims[i];
  strides_for(nb, dims, nhwc, t.strides);
  t.span = physical(&t, t.count - 1) + 1;
  t.p = dalloc((size_t)t.span * esize(dtype));
  return t;
}

/* Writes logical values (NULL: fills every byte with 0xFF, NaN). */
static void dt_write(const dt *t, const double *v) {
  size_t bytes = (size_t)t->span * esize(t->dtype);
  unsigned char *buf = malloc(bytes);
  assert_non_null(buf);
  memset(buf, 0xff, bytes);
  if (v)
    for (long i = 0; i < t->count; i++) put_elem(buf, t->dtype, physical(t, i), v[i]);
  assert_int_equal(fk.MemcpyHtoD(t->p, buf, bytes), CUDA_SUCCESS);
  free(buf);
}

static double *dt_read(const dt *t) {
  size_t bytes = (size_t)t->span * esize(t->dtype);
  unsigned char *buf = malloc(bytes);
  double *v = malloc((size_t)t->count * sizeof *v);
  assert_non_null(buf);
  assert_non_null(v);
  download(buf, t->p, bytes);
  for (long i = 0; i < t->count; i++) v[i] = get_elem(buf, t->dtype, physical(t, i));
  free(buf);
  return v;
}

static tdesc_t tensor_desc(const dt *t) {
  tdesc_t d = NULL;
  assert_int_equal(dn.CreateTensor(&d), S_OK);
  assert_int_equal(dn.SetTensorNd(d, t->dtype, t->nb, t->dims, t->strides), S_OK);
  return d;
}

/* --------------------------------------------------- the convolutions --- */

/* One convolution: spatial axes padded to 3 with size 1 for the reference;
 * nsp is what the descriptors say (2 for a 1-D one in a 4-D tensor). */
typedef struct conv_case {
  const char *name;
  int nsp, n, c, k, g;
  int in[3], ker[3], pad[3], stride[3], dil[3];
  int mode, nhwc, dtype;
} conv_case;

static void sizes_of(const conv_case *cc, int *out) {
  for (int i = 0; i < 3; i++) {
    int in = i < cc->nsp ? cc->in[i] : 1, k = i < cc->nsp ? cc->ker[i] : 1;
    int p = i < cc->nsp ? cc->pad[i] : 0, s = i < cc->nsp ? cc->stride[i] : 1, d = i < cc->nsp ? cc->dil[i] : 1;
    out[i] = (in + 2 * p - ((k - 1) * d + 1)) / s + 1;
  }
}

/* A convolution's reference in double, by scattering every product where
 * it goes (forward into y, data into dx, filter into dw); mag gets the sum
 * of the products' magnitudes, the scale of a rounding error. */
static void reference(const conv_case *cc, int dir, const double *x, const double *w, const double *dy, double *out,
                      double *mag) {
  int o[3], in[3], ker[3], pad[3], st[3], dl[3];
  sizes_of(cc, o);
  for (int i = 0; i < 3; i++) {
    int used = i < cc->nsp;
    in[i] = used ? cc->in[i] : 1, ker[i] = used ? cc->ker[i] : 1, pad[i] = used ? cc->pad[i] : 0;
    st[i] = used ? cc->stride[i] : 1, dl[i] = used ? cc->dil[i] : 1;
  }
  long nx = (long)cc->n * cc->c * in[0] * in[1] * in[2], nw = (long)cc->k * (cc->c / cc->g) * ker[0] * ker[1] * ker[2];
  long ny = (long)cc->n * cc->k * o[0] * o[1] * o[2];
  long nout = dir == FWD ? ny : dir == BWD_DATA ? nx : nw;
  memset(out, 0, (size_t)nout * sizeof *out);
  memset(mag, 0, (size_t)nout * sizeof *mag);
  int cg = cc->c / cc->g, kg = cc->k / cc->g;
  for (int n = 0; n < cc->n; n++)
    for (int k = 0; k < cc->k; k++)
      for (int a = 0; a < o[0]; a++)
        for (int b = 0; b < o[1]; b++)
          for (int e = 0; e < o[2]; e++)
            for (int cl = 0; cl < cg; cl++)
              for (int t0 = 0; t0 < ker[0]; t0++)
                for (int t1 = 0; t1 < ker[1]; t1++)
                  for (int t2 = 0; t2 < ker[2]; t2++) {
                    int i0 = a * st[0] - pad[0] + t0 * dl[0], i1 = b * st[1] - pad[1] + t1 * dl[1];
                    int i2 = e * st[2] - pad[2] + t2 * dl[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                    int w0 = t0, w1 = t1, w2 = t2;
                    if (cc->mode == CONV) w0 = ker[0] - 1 - t0, w1 = ker[1] - 1 - t1, w2 = ker[2] - 1 - t2;
                    int c = k / kg * cg + cl;
                    long xi = (((long)n * cc->c + c) * in[0] + i0) * in[1] * in[2] + (long)i1 * in[2] + i2;
                    long wi = (((long)k * cg + cl) * ker[0] + w0) * ker[1] * ker[2] + (long)w1 * ker[2] + w2;
                    long yi = (((long)n * cc->k + k) * o[0] + a) * o[1] * o[2] + (long)b * o[2] + e;
                    double prod, *dst, *m;
                    if (dir == FWD) prod = x[xi] * w[wi], dst = out + yi, m = mag + yi;
                    else if (dir == BWD_DATA) prod = dy[yi] * w[wi], dst = out + xi, m = mag + xi;
                    else prod = x[xi] * dy[yi], dst = out + wi, m = mag + wi;
                    *dst += prod;
                    *m += fabs(prod);
                  }
}

/* The device side of a case: tensors, descriptors. */
typedef struct conv_setup {
  dt x, w, y;
  tdesc_t xd, yd;
  fdesc_t wd;
  cdesc_t cd;
} conv_setup;

static void shapes_of(const conv_case *cc, int *xs, int *ws, int *ys) {
  int o[3];
  sizes_of(cc, o);
  xs[0] = cc->n, xs[1] = cc->c, ws[0] = cc->k, ws[1] = cc->c / cc->g, ys[0] = cc->n, ys[1] = cc->k;
  for (int i = 0; i < cc->nsp; i++) xs[2 + i] = cc->in[i], ws[2 + i] = cc->ker[i], ys[2 + i] = o[i];
}

static conv_setup conv_up(const conv_case *cc) {
  conv_setup s;
  int xs[5], ws[5], ys[5], nb = cc->nsp + 2;
  shapes_of(cc, xs, ws, ys);
  s.x = make_dt(nb, xs, cc->nhwc, cc->dtype);
  s.w = make_dt(nb, ws, cc->nhwc, cc->dtype);
  s.y = make_dt(nb, ys, cc->nhwc, cc->dtype);
  s.xd = tensor_desc(&s.x);
  s.yd = tensor_desc(&s.y);
  assert_int_equal(dn.CreateFilter(&s.wd), S_OK);
  assert_int_equal(dn.SetFilterNd(s.wd, cc->dtype, cc->nhwc ? NHWC : NCHW, nb, ws), S_OK);
  assert_int_equal(dn.CreateConv(&s.cd), S_OK);
  int compute = cc->dtype == DOUBLE ? DOUBLE : FLOAT;
  assert_int_equal(dn.SetConvNd(s.cd, cc->nsp, cc->pad, cc->stride, cc->dil, cc->mode, compute), S_OK);
  assert_int_equal(dn.SetGroups(s.cd, cc->g), S_OK);
  assert_int_equal(dn.SetMath(s.cd, FMA), S_OK);
  return s;
}

static void conv_down(conv_setup *s) {
  dfree(s->x.p), dfree(s->w.p), dfree(s->y.p);
  assert_int_equal(dn.DestroyTensor(s->xd), S_OK);
  assert_int_equal(dn.DestroyTensor(s->yd), S_OK);
  assert_int_equal(dn.DestroyFilter(s->wd), S_OK);
  assert_int_equal(dn.DestroyConv(s->cd), S_OK);
}

/* Runs direction dir with algorithm algo (its workspace allocated), blending
 * with alpha and beta; returns the status. */
static st_t run_dir(hnd_t h, conv_setup *s, int dir, int algo, double alpha, double beta) {
  size_t ws = 0;
  st_t r = dir == FWD        ? dn.FwdWs(h, s->xd, s->wd, s->cd, s->yd, algo, &ws)
           : dir == BWD_DATA ? dn.DataWs(h, s->wd, s->yd, s->cd, s->xd, algo, &ws)
                             : dn.FilterWs(h, s->xd, s->yd, s->cd, s->wd, algo, &ws);
  if (r != S_OK) return r;
  CUdeviceptr wsp = ws ? dalloc(ws) : 0;
  float af = (float)alpha, bf = (float)beta;
  const void *a = s->x.dtype == DOUBLE ? (const void *)&alpha : (const void *)&af;
  const void *b = s->x.dtype == DOUBLE ? (const void *)&beta : (const void *)&bf;
  if (dir == FWD)
    r = dn.Fwd(h, a, s->xd, P(s->x.p), s->wd, P(s->w.p), s->cd, algo, P(wsp), ws, b, s->yd, P(s->y.p));
  else if (dir == BWD_DATA)
    r = dn.Data(h, a, s->wd, P(s->w.p), s->yd, P(s->y.p), s->cd, algo, P(wsp), ws, b, s->xd, P(s->x.p));
  else
    r = dn.Filter(h, a, s->xd, P(s->x.p), s->yd, P(s->y.p), s->cd, algo, P(wsp), ws, b, s->wd, P(s->w.p));
  if (wsp) dfree(wsp);
  return r;
}

static const int n_algos[3] = {8, 6, 7};

/* Tolerance of a result against the double-precision reference: a few
 * roundings of the type per unit of the products' magnitude. */
static double tolerance(int dtype, double mag) {
  double eps = dtype == DOUBLE ? 1e-15 : dtype == FLOAT ? 6e-8 : dtype == HALF ? 1e-3 : 8e-3;
  return 8 * eps * (mag + 1e-3) + (dtype == DOUBLE ? 1e-300 : 1e-30);
}

/* Runs every algorithm of a direction on a case; each supported one must
 * match the reference; returns how many ran. */
static int check_direction(hnd_t h, const conv_case *cc, int dir) {
  conv_setup s = conv_up(cc);
  double *x = values(1, s.x.count), *w = values(2, s.w.count), *dy = values(3, s.y.count);
  /* Inputs as the type holds them, so the reference sees the same numbers. */
  dt_write(&s.x, x), dt_write(&s.w, w), dt_write(&s.y, dy);
  double *rx = dt_read(&s.x), *rw = dt_read(&s.w), *rdy = dt_read(&s.y);
  long nout = dir == FWD ? s.y.count : dir == BWD_DATA ? s.x.count : s.w.count;
  double *want = malloc((size_t)nout * sizeof *want), *mag = malloc((size_t)nout * sizeof *mag);
  reference(cc, dir, rx, rw, rdy, want, mag);
  dt *out = dir == FWD ? &s.y : dir == BWD_DATA ? &s.x : &s.w;
  int ran = 0;
  for (int algo = 0; algo < n_algos[dir]; algo++) {
    dt_write(out, NULL); /* NaN: beta 0 must not read it */
    st_t r = run_dir(h, &s, dir, algo, 1.0, 0.0);
    if (r == S_NOTSUP) continue;
    if (r != S_OK) fprintf(stderr, "%s dir %d algo %d: status %d (%s)\n", cc->name, dir, algo, r, dn.last_error());
    assert_int_equal(r, S_OK);
    ran++;
    double *got = dt_read(out);
    for (long i = 0; i < nout; i++)
      if (!(fabs(got[i] - want[i]) <= tolerance(cc->dtype, mag[i]))) {
        fprintf(stderr, "%s dir %d algo %d: element %ld is %.9g, want %.9g\n", cc->name, dir, algo, i, got[i], want[i]);
        fail();
      }
    free(got);
    /* The inputs of the next algorithm are the ones written above. */
    if (dir == BWD_DATA) dt_write(&s.w, w), dt_write(&s.y, dy);
    else if (dir == BWD_FILTER) dt_write(&s.x, x), dt_write(&s.y, dy);
  }
  free(x), free(w), free(dy), free(rx), free(rw), free(rdy), free(want), free(mag);
  conv_down(&s);
  return ran;
}

/* name nsp n c k g in ker pad stride dil mode nhwc dtype */
static const conv_case cases[] = {
    {"3x3 same", 2, 2, 3, 4, 1, {6, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT},
    {"stride 2 pad 2", 2, 2, 2, 3, 1, {7, 8}, {3, 2}, {2, 1}, {2, 3}, {1, 1}, XCORR, 0, FLOAT},
    {"dilation 2", 2, 1, 2, 2, 1, {9, 8}, {3, 3}, {2, 1}, {1, 1}, {2, 3}, XCORR, 0, FLOAT},
    {"groups 2", 2, 2, 4, 6, 2, {5, 5}, {3, 3}, {1, 0}, {1, 1}, {1, 1}, XCORR, 0, FLOAT},
    {"depthwise", 2, 1, 3, 3, 3, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT},
    {"convolution mode", 2, 2, 2, 3, 1, {5, 6}, {3, 2}, {1, 0}, {1, 1}, {1, 1}, CONV, 0, FLOAT},
    {"1-D in 4-D", 2, 2, 3, 2, 1, {1, 11}, {1, 5}, {0, 2}, {1, 2}, {1, 2}, XCORR, 0, FLOAT},
    {"NHWC", 2, 2, 3, 4, 1, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 1, FLOAT},
    {"3-D", 3, 1, 2, 3, 1, {4, 5, 4}, {3, 2, 3}, {1, 0, 1}, {1, 2, 1}, {1, 1, 1}, CONV, 0, FLOAT},
    {"3-D NHWC dilated", 3, 2, 2, 2, 2, {5, 4, 5}, {2, 2, 2}, {0, 1, 1}, {1, 1, 2}, {2, 1, 1}, XCORR, 1, FLOAT},
    {"f64 grouped", 2, 2, 4, 2, 2, {5, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, CONV, 0, DOUBLE},
    {"5x5 winograd", 2, 1, 2, 2, 1, {7, 7}, {5, 5}, {2, 2}, {1, 1}, {1, 1}, XCORR, 0, FLOAT},
};

static void forward_matches_reference(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  int total = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) total += check_direction(h, &cases[i], FWD);
  /* The support rules of README.md, case by case: 7+3+3+5+5+5+3+7+2+2+3+6. */
  assert_int_equal(total, 51);
  assert_int_equal(dn.Destroy(h), S_OK);
}

static void backward_data_matches_reference(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  int total = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) total += check_direction(h, &cases[i], BWD_DATA);
  /* 6+2+2+4+4+4+2+6+2+2+2+5 */
  assert_int_equal(total, 41);
  assert_int_equal(dn.Destroy(h), S_OK);
}

static void backward_filter_matches_reference(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  int total = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) total += check_direction(h, &cases[i], BWD_FILTER);
  /* 6+3+3+4+4+5+3+6+3+3+3+6 */
  assert_int_equal(total, 49);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* The project's own forward reference (tests/support/conv_reference.c)
 * agrees with the double on a cross-correlation with asymmetric geometry. */
static void forward_matches_shared_reference(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("8.6");
  conv_case cc = {"shared", 2, 2, 4, 4, 2, {7, 6}, {3, 2}, {1, 1}, {2, 1}, {1, 2}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  ts_conv tc = {.nsp = 2, .n = 2, .c = 4, .m = 4, .g = 2};
  for (int i = 0; i < 2; i++)
    tc.in[i] = cc.in[i], tc.k[i] = cc.ker[i], tc.s[i] = cc.stride[i], tc.d[i] = cc.dil[i], tc.pb[i] = tc.pe[i] = cc.pad[i];
  double *x = values(7, s.x.count), *w = values(8, s.w.count);
  float *xf = malloc((size_t)s.x.count * sizeof *xf), *wf = malloc((size_t)s.w.count * sizeof *wf);
  for (long i = 0; i < s.x.count; i++) xf[i] = (float)x[i];
  for (long i = 0; i < s.w.count; i++) wf[i] = (float)w[i];
  dt_write(&s.x, x), dt_write(&s.w, w);
  double *want = ts_conv_reference(&tc, xf, wf, NULL);
  assert_int_equal(run_dir(h, &s, FWD, 1, 1.0, 0.0), S_OK);
  double *got = dt_read(&s.y);
  for (long i = 0; i < s.y.count; i++) assert_true(fabs(got[i] - want[i]) < 1e-5);
  free(x), free(w), free(xf), free(wf), free(want), free(got);
  conv_down(&s);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* dst = alpha result + beta prior, with float scalars for f32 data and
 * double ones for f64 data; beta 0 never reads the (NaN) prior. */
static void alpha_and_beta_blend(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  for (int dtype = FLOAT; dtype <= DOUBLE; dtype++) {
    conv_case cc = {"blend", 2, 1, 2, 2, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, dtype};
    for (int dir = FWD; dir <= BWD_FILTER; dir++) {
      conv_setup s = conv_up(&cc);
      double *x = values(11, s.x.count), *w = values(12, s.w.count), *dy = values(13, s.y.count);
      dt_write(&s.x, x), dt_write(&s.w, w), dt_write(&s.y, dy);
      dt *out = dir == FWD ? &s.y : dir == BWD_DATA ? &s.x : &s.w;
      long n = out->count;
      double *want = malloc((size_t)n * sizeof *want), *mag = malloc((size_t)n * sizeof *mag);
      reference(&cc, dir, x, w, dy, want, mag);
      double *prior = values(14, n);
      dt_write(out, prior);
      assert_int_equal(run_dir(h, &s, dir, 1, 2.0, 0.5), S_OK);
      double *got = dt_read(out);
      for (long i = 0; i < n; i++) assert_true(fabs(got[i] - (2.0 * want[i] + 0.5 * prior[i])) <= 4 * tolerance(dtype, mag[i] + 1));
      free(got);
      dt_write(out, NULL); /* NaN prior, beta 0: no NaN out */
      if (dir != FWD) dt_write(dir == BWD_DATA ? &s.w : &s.x, dir == BWD_DATA ? w : x), dt_write(&s.y, dy);
      assert_int_equal(run_dir(h, &s, dir, 1, 1.0, 0.0), S_OK);
      got = dt_read(out);
      for (long i = 0; i < n; i++) assert_false(isnan(got[i]));
      free(got), free(x), free(w), free(dy), free(want), free(mag), free(prior);
      conv_down(&s);
    }
  }
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* ---------------------------------------------- algorithms and search --- */

/* Values of mixed magnitude, so that the order of a sum shows in its bits. */
static double *order_sensitive(unsigned seed, long n) {
  double *v = values(seed, n);
  for (long i = 0; i < n; i++) v[i] *= (i % 3 == 0) ? 1000.0 : (i % 3 == 1) ? 0.001 : 1.0;
  return v;
}

static int same_bits(const double *a, const double *b, long n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

/* Each algorithm sums in its own order: results of different algorithms
 * differ in the last bits; a deterministic one repeats its bits exactly;
 * the non-deterministic ALGO_0 (backward filter) does not always. */
static void algorithms_sum_in_their_own_orders(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  conv_case cc = {"orders", 2, 16, 4, 4, 1, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  double *x = order_sensitive(21, s.x.count), *w = order_sensitive(22, s.w.count), *dy = order_sensitive(23, s.y.count);
  double *res[8];
  int distinct_fwd = 0;
  /* Forward: 0 IMPLICIT_GEMM, 1 PRECOMP, 2 GEMM, 5 FFT_TILING, 6 WINOGRAD, 7 NONFUSED (FFT and DIRECT: 4 and 3). */
  const int fwd[] = {0, 1, 2, 4, 5, 6, 7};
  for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++) {
    dt_write(&s.x, x), dt_write(&s.w, w);
    assert_int_equal(run_dir(h, &s, FWD, fwd[i], 1.0, 0.0), S_OK);
    res[i] = dt_read(&s.y);
    int new_bits = 1;
    for (size_t j = 0; j < i; j++) new_bits &= !same_bits(res[i], res[j], s.y.count);
    distinct_fwd += new_bits;
  }
  assert_true(distinct_fwd >= 5);
  for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++) {
    /* A deterministic algorithm gives the same bits again. */
    dt_write(&s.y, NULL);
    assert_int_equal(run_dir(h, &s, FWD, fwd[i], 1.0, 0.0), S_OK);
    double *again = dt_read(&s.y);
    assert_true(same_bits(again, res[i], s.y.count));
    free(again), free(res[i]);
  }
  /* Backward filter ALGO_0 over 8 runs: more than one bit pattern, none
   * equal to ALGO_1's plain order more than by chance. */
  double *det = NULL;
  dt_write(&s.x, x), dt_write(&s.y, dy);
  assert_int_equal(run_dir(h, &s, BWD_FILTER, 1, 1.0, 0.0), S_OK);
  det = dt_read(&s.w);
  double *runs[8];
  int patterns = 0, like_algo1 = 0;
  for (int r = 0; r < 8; r++) {
    assert_int_equal(run_dir(h, &s, BWD_FILTER, 0, 1.0, 0.0), S_OK);
    runs[r] = dt_read(&s.w);
    int new_bits = 1;
    for (int j = 0; j < r; j++) new_bits &= !same_bits(runs[r], runs[j], s.w.count);
    patterns += new_bits;
    like_algo1 += same_bits(runs[r], det, s.w.count);
  }
  assert_true(patterns >= 2);
  assert_int_equal(like_algo1, 0);
  for (int r = 0; r < 8; r++) free(runs[r]);
  free(det), free(x), free(w), free(dy);
  conv_down(&s);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* The pretend time of README.md, computed here: fixed_us + MACs / rate +
 * workspace / 20000, in ms. */
static double pretend(double fixed_us, double rate, double macs, double ws) { return (fixed_us + macs / rate + ws / 20000.0) / 1000.0; }

/* Find: records sorted by the pretend time, failures after; the winner
 * depends on the problem as documented; a workspace limit turns the
 * algorithms that need more into ALLOC_FAILED; y is left NaN; calls are
 * counted. */
static void find_orders_by_time_and_honours_the_workspace(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  /* Small: IMPLICIT_GEMM's low fixed cost wins. */
  conv_case small = {"small", 2, 1, 2, 2, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&small);
  CUdeviceptr ws = dalloc(1 << 20);
  perf_t perf[8];
  int n = 0;
  double zeros[64] = {0};
  dt_write(&s.y, zeros);
  unsigned long before = dn.call_count("cudnnFindConvolutionForwardAlgorithmEx");
  assert_int_equal(dn.FwdFind(h, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, s.yd, P(s.y.p), 8, &n, perf, P(ws), 1 << 20), S_OK);
  assert_int_equal(dn.call_count("cudnnFindConvolutionForwardAlgorithmEx"), before + 1);
  assert_int_equal(n, 8);
  assert_int_equal(perf[0].algo, 0);
  assert_int_equal(perf[0].status, S_OK);
  double macs = 1.0 * 2 * 16 * 2 * 9;
  assert_true(fabs(perf[0].time - pretend(5, 500, macs, 0)) < 1e-6);
  assert_int_equal(perf[0].memory, 0);
  assert_int_equal(perf[0].determinism, 1);
  assert_int_equal(perf[0].mathType, FMA);
  int ok = 0;
  for (int i = 0; i < n; i++) {
    if (perf[i].status == S_OK) {
      ok++;
      if (i > 0 && perf[i - 1].status == S_OK) assert_true(perf[i - 1].time <= perf[i].time);
    } else {
      assert_true(i >= ok); /* failures only after the successes */
      assert_true(perf[i].time < 0);
    }
    if (perf[i].algo == 3) assert_int_equal(perf[i].status, S_NOTSUP); /* DIRECT */
  }
  assert_int_equal(ok, 7);
  double *y = dt_read(&s.y);
  for (long i = 0; i < s.y.count; i++) assert_true(isnan(y[i]));
  free(y);
  /* No workspace: every algorithm that needs some is ALLOC_FAILED, with
   * the memory it needs. */
  assert_int_equal(dn.FwdFind(h, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, s.yd, P(s.y.p), 8, &n, perf, NULL, 0), S_OK);
  int alloc_failed = 0;
  for (int i = 0; i < n; i++) {
    size_t need = 0;
    if (perf[i].status == S_NOTSUP) continue;
    assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, perf[i].algo, &need), S_OK);
    assert_int_equal(perf[i].status, need > 0 ? S_ALLOC : S_OK);
    assert_int_equal(perf[i].memory, need);
    alloc_failed += perf[i].status == S_ALLOC;
  }
  assert_true(alloc_failed >= 3);
  /* Three asked, three given. */
  assert_int_equal(dn.FwdFind(h, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, s.yd, P(s.y.p), 3, &n, perf, P(ws), 1 << 20), S_OK);
  assert_int_equal(n, 3);
  assert_int_equal(dn.FwdFind(h, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, s.yd, P(s.y.p), 0, &n, perf, P(ws), 1 << 20), S_BAD);
  conv_down(&s);
  /* Large 3x3, stride 1: WINOGRAD_NONFUSED with TF32 tensor cores (default
   * math on CC 9.0, x4) beats everything; with FMA math, FFT does. */
  conv_case big = {"big", 2, 8, 32, 32, 1, {32, 32}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT};
  s = conv_up(&big);
  CUdeviceptr ws_big = dalloc(64 << 20);
  assert_int_equal(dn.SetMath(s.cd, DEFAULT_MATH), S_OK);
  assert_int_equal(dn.FwdFind(h, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, s.yd, P(s.y.p), 8, &n, perf, P(ws_big), 64 << 20), S_OK);
  assert_int_equal(perf[0].algo, 7);
  size_t nf_ws = 0;
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 7, &nf_ws), S_OK);
  macs = 8.0 * 32 * 32 * 32 * 32 * 9;
  assert_true(fabs(perf[0].time - pretend(20, 2500 * 4, macs, (double)nf_ws)) < 1e-3 * perf[0].time);
  assert_int_equal(dn.SetMath(s.cd, FMA), S_OK);
  assert_int_equal(dn.FwdFind(h, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, s.yd, P(s.y.p), 8, &n, perf, P(ws_big), 64 << 20), S_OK);
  assert_int_equal(perf[0].algo, 4);
  dfree(ws_big);
  conv_down(&s);
  dfree(ws);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* The backward searches: ALGO_0 (non-deterministic, cheapest) wins a small
 * problem and says so in its record; Find needs valid buffers. */
static void backward_searches(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  conv_case cc = {"bwd", 2, 2, 2, 2, 1, {5, 5}, {3, 3}, {1, 1}, {2, 2}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  CUdeviceptr ws = dalloc(1 << 20);
  perf_t perf[8];
  int n = 0;
  assert_int_equal(dn.DataFind(h, s.wd, P(s.w.p), s.yd, P(s.y.p), s.cd, s.xd, P(s.x.p), 8, &n, perf, P(ws), 1 << 20), S_OK);
  assert_int_equal(n, 6);
  assert_int_equal(perf[0].algo, 0);
  assert_int_equal(perf[0].determinism, 0);
  for (int i = 0; i < n; i++)
    if (perf[i].algo == 2 || perf[i].algo == 3 || perf[i].algo == 4 || perf[i].algo == 5)
      assert_int_equal(perf[i].status, S_NOTSUP); /* stride 2: no FFT or Winograd */
  assert_int_equal(dn.FilterFind(h, s.xd, P(s.x.p), s.yd, P(s.y.p), s.cd, s.wd, P(s.w.p), 8, &n, perf, P(ws), 1 << 20), S_OK);
  assert_int_equal(n, 7);
  assert_int_equal(perf[0].algo, 0);
  for (int i = 0; i < n; i++) {
    if (perf[i].algo == 4) assert_int_equal(perf[i].status, S_NOTSUP); /* WINOGRAD: never */
    if (perf[i].algo == 3) assert_int_equal(perf[i].determinism, 0);
    if (perf[i].algo == 1) assert_int_equal(perf[i].determinism, 1);
  }
  assert_int_equal(dn.FilterFind(h, s.xd, NULL, s.yd, P(s.y.p), s.cd, s.wd, P(s.w.p), 8, &n, perf, P(ws), 1 << 20), S_NULL);
  dfree(ws);
  conv_down(&s);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* Find is synchronous, as the real search (it times kernels): its trial
 * has run when it returns, even on a non-blocking stream; an operand out of
 * bounds fails the search itself. */
static void find_is_synchronous_and_checks_its_buffers(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  CUstream st;
  assert_int_equal(fk.StreamCreate(&st, 1), CUDA_SUCCESS);
  assert_int_equal(dn.SetStream(h, st), S_OK);
  conv_case cc = {"sync", 2, 1, 2, 2, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  double zeros[64] = {0};
  dt_write(&s.y, zeros);
  perf_t perf[8];
  int n = 0;
  assert_int_equal(dn.FwdFind(h, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, s.yd, P(s.y.p), 8, &n, perf, NULL, 0), S_OK);
  assert_int_equal(fk.pending_ops(), 0);
  double *y = dt_read(&s.y); /* the legacy stream: would not wait for st */
  assert_true(isnan(y[0]));
  free(y);
  CUdeviceptr small = dalloc(16);
  assert_int_equal(dn.FwdFind(h, s.xd, P(small), s.wd, P(s.w.p), s.cd, s.yd, P(s.y.p), 8, &n, perf, NULL, 0), S_EXEC_DRIVER);
  assert_true(strstr(fk.last_error(), "cudnnFindConvolutionForwardAlgorithmEx: operand x") != NULL);
  /* The context is faulted: what was made in it goes with the reset. */
  dn.reset();
}

/* The heuristic answers in its documented preference, supported first. */
static void heuristic_order(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  conv_case cc = {"v7", 2, 1, 2, 2, 1, {6, 6}, {3, 3}, {1, 1}, {2, 2}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  perf_t perf[8];
  int n = 0;
  assert_int_equal(dn.FwdV7(h, s.xd, s.wd, s.cd, s.yd, 8, &n, perf), S_OK);
  /* Stride 2: 1, 0, 2 supported (7, 5, 4, 6 need stride 1; 3 never). */
  const int want[8] = {1, 0, 2, 7, 5, 4, 6, 3};
  for (int i = 0; i < 8; i++) {
    assert_int_equal(perf[i].algo, want[i]);
    assert_int_equal(perf[i].status, i < 3 ? S_OK : S_NOTSUP);
  }
  assert_int_equal(dn.DataV7(h, s.wd, s.yd, s.cd, s.xd, 8, &n, perf), S_OK);
  assert_int_equal(n, 6);
  assert_int_equal(perf[0].algo, 1);
  assert_int_equal(perf[1].algo, 0);
  assert_int_equal(dn.FilterV7(h, s.xd, s.yd, s.cd, s.wd, 8, &n, perf), S_OK);
  assert_int_equal(n, 7);
  assert_int_equal(perf[0].algo, 1);
  assert_int_equal(perf[2].algo, 3);
  int count = 0;
  assert_int_equal(dn.FwdMax(h, &count), S_OK);
  assert_int_equal(count, 8);
  conv_down(&s);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* The workspace formulas of README.md, and running with less than needed. */
static void workspace_sizes_and_too_small_a_workspace(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  conv_case cc = {"ws", 2, 2, 4, 6, 2, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  size_t ws = 0;
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 0, &ws), S_OK);
  assert_int_equal(ws, 0);
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 1, &ws), S_OK);
  assert_int_equal(ws, 4 * 2 * 9); /* int offsets: c/g x taps */
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 2, &ws), S_OK);
  assert_int_equal(ws, 4 * 2 * 9 * 64); /* im2col of one image of one group */
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 7, &ws), S_OK);
  assert_int_equal(ws, 4 * 36 * (6 * 2 + 2 * 4 * (4 + 6)));
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 4, &ws), S_NOTSUP); /* FFT: one group only */
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 3, &ws), S_NOTSUP);
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 8, &ws), S_BAD);
  assert_int_equal(dn.FilterWs(h, s.xd, s.yd, s.cd, s.wd, 3, &ws), S_OK);
  assert_int_equal(ws, 4 * 6 * 2 * 9 * 2);
  /* GEMM with one byte too few: refused; with none at all but a size, NULL. */
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 2, &ws), S_OK);
  CUdeviceptr wsp = dalloc(ws);
  float one = 1, zero = 0;
  assert_int_equal(dn.Fwd(h, &one, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, 2, P(wsp), ws - 1, &zero, s.yd, P(s.y.p)), S_SIZE);
  assert_int_equal(dn.Fwd(h, &one, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, 2, NULL, ws, &zero, s.yd, P(s.y.p)), S_NULL);
  /* Enough: it runs, and leaves garbage (NaN bytes) in the workspace. */
  unsigned char *bytes = calloc(ws, 1);
  assert_int_equal(fk.MemcpyHtoD(wsp, bytes, ws), CUDA_SUCCESS);
  dt_write(&s.x, NULL), dt_write(&s.w, NULL);
  assert_int_equal(dn.Fwd(h, &one, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, 2, P(wsp), ws, &zero, s.yd, P(s.y.p)), S_OK);
  download(bytes, wsp, ws);
  assert_int_equal(bytes[0], 0xff);
  assert_int_equal(bytes[ws - 1], 0xff);
  assert_true(strstr(dn.last_call(), "algo=GEMM(2)") != NULL);
  assert_true(strstr(dn.last_call(), "workspace=") != NULL);
  free(bytes);
  dfree(wsp);
  conv_down(&s);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* Math types on f32 data: FMA exact; default math on CC 9.0 rounds the
 * inputs of tensor-core algorithms to TF32 (not of the others), and not on
 * CC 7.5; ALLOW_CONVERSION on CC 7.5 rounds them to f16;
 * NVIDIA_TF32_OVERRIDE=0 turns TF32 off. */
static double max_error(const double *got, const double *want, long n) {
  double e = 0;
  for (long i = 0; i < n; i++) e = fmax(e, fabs(got[i] - want[i]));
  return e;
}

static double error_with(const char *cc_text, int math, int algo, const char *tf32_override, int rounding) {
  if (tf32_override) setenv("NVIDIA_TF32_OVERRIDE", tf32_override, 1);
  else unsetenv("NVIDIA_TF32_OVERRIDE");
  hnd_t h = up(cc_text);
  conv_case cc = {"math", 2, 1, 8, 2, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  assert_int_equal(dn.SetMath(s.cd, math), S_OK);
  double *x = values(31, s.x.count), *w = values(32, s.w.count);
  for (long i = 0; i < s.x.count; i++) x[i] = (float)(x[i] * 1.2345678);
  for (long i = 0; i < s.w.count; i++) w[i] = (float)(w[i] * 0.7654321);
  dt_write(&s.x, x), dt_write(&s.w, w);
  /* rounding 1: the reference sees TF32 inputs; 2: f16 inputs. */
  for (long i = 0; rounding && i < s.x.count; i++) x[i] = rounding == 1 ? tf32(x[i]) : from_half_bits(to_half_bits(x[i]));
  for (long i = 0; rounding && i < s.w.count; i++) w[i] = rounding == 1 ? tf32(w[i]) : from_half_bits(to_half_bits(w[i]));
  double *want = malloc((size_t)s.y.count * sizeof *want), *mag = malloc((size_t)s.y.count * sizeof *mag);
  reference(&cc, FWD, x, w, NULL, want, mag);
  assert_int_equal(run_dir(h, &s, FWD, algo, 1.0, 0.0), S_OK);
  double *got = dt_read(&s.y);
  double e = max_error(got, want, s.y.count);
  free(x), free(w), free(want), free(mag), free(got);
  conv_down(&s);
  assert_int_equal(dn.Destroy(h), S_OK);
  return e;
}

static void math_types_round_inputs_as_tensor_cores_do(void **state) {
  (void)state;
  NEED();
  const double exact = 5e-5, tf32_like = 5e-4;
  /* FMA: exact, whatever the algorithm. */
  assert_true(error_with("9.0", FMA, 1, NULL, 0) < exact);
  /* Default math, CC 9.0: PRECOMP (tensor cores) takes TF32 inputs... */
  assert_true(error_with("9.0", DEFAULT_MATH, 1, NULL, 0) > tf32_like);
  assert_true(strstr(dn.last_call(), "inputs=TF32") != NULL);
  assert_true(error_with("9.0", DEFAULT_MATH, 1, NULL, 1) < exact);
  /* ...IMPLICIT_GEMM (none) is exact; so is CC 7.5, and TF32 overridden. */
  assert_true(error_with("9.0", DEFAULT_MATH, 0, NULL, 0) < exact);
  assert_true(error_with("7.5", DEFAULT_MATH, 1, NULL, 0) < exact);
  assert_true(error_with("9.0", DEFAULT_MATH, 1, "0", 0) < exact);
  /* ALLOW_CONVERSION on CC 7.5: f16 inputs. */
  assert_true(error_with("7.5", ALLOW_CONVERSION, 7, NULL, 0) > tf32_like);
  assert_true(error_with("7.5", ALLOW_CONVERSION, 7, NULL, 2) < exact);
  unsetenv("NVIDIA_TF32_OVERRIDE");
}

/* f16 data (f32 and f16 computation) and bf16 data (CC 8.0 and later). */
static void half_and_bfloat16(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("8.0");
  conv_case f16 = {"f16", 2, 1, 3, 2, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, HALF};
  conv_case b16 = {"bf16", 2, 1, 3, 2, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, CONV, 1, BF16};
  assert_true(check_direction(h, &f16, FWD) >= 4);
  assert_true(check_direction(h, &f16, BWD_DATA) >= 2);
  assert_true(check_direction(h, &b16, FWD) >= 2);
  assert_true(check_direction(h, &b16, BWD_FILTER) >= 2);
  assert_int_equal(dn.Destroy(h), S_OK);
  /* TRUE_HALF_CONFIG (f16 computation): CC 5.3 and later. */
  conv_setup th = conv_up(&f16);
  int pad1[2] = {1, 1}, ones[2] = {1, 1};
  assert_int_equal(dn.SetConvNd(th.cd, 2, pad1, ones, ones, XCORR, HALF), S_OK);
  h = up("8.0");
  size_t ws0;
  assert_int_equal(dn.FwdWs(h, th.xd, th.wd, th.cd, th.yd, 0, &ws0), S_OK);
  assert_int_equal(dn.Destroy(h), S_OK);
  setenv("FAKECUDNN_VERSION", "9.10.2", 1);
  h = up("5.2");
  assert_int_equal(dn.FwdWs(h, th.xd, th.wd, th.cd, th.yd, 0, &ws0), S_NOTSUP_TYPE);
  assert_int_equal(dn.Destroy(h), S_OK);
  unsetenv("FAKECUDNN_VERSION");
  dn.reset();
  /* bf16 before CC 8.0, and f64 data with an f32 convolution: no such configuration. */
  h = up("7.5");
  conv_setup s = conv_up(&b16);
  size_t ws;
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 0, &ws), S_NOTSUP_TYPE);
  conv_down(&s);
  conv_case d = {"f64", 2, 1, 3, 2, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, CONV, 0, DOUBLE};
  s = conv_up(&d);
  int pad[2] = {1, 1}, one[2] = {1, 1};
  assert_int_equal(dn.SetConvNd(s.cd, 2, pad, one, one, XCORR, FLOAT), S_OK);
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 0, &ws), S_NOTSUP_TYPE);
  conv_down(&s);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* ------------------------------------------------------- call rules ---- */

static void convolution_bad_params(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  conv_case cc = {"rules", 2, 2, 4, 6, 2, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  float one = 1, zero = 0;
  void *x = P(s.x.p), *w = P(s.w.p), *y = P(s.y.p);
  assert_int_equal(dn.Fwd(h, NULL, s.xd, x, s.wd, w, s.cd, 0, NULL, 0, &zero, s.yd, y), S_NULL);
  assert_int_equal(dn.Fwd(h, &one, s.xd, NULL, s.wd, w, s.cd, 0, NULL, 0, &zero, s.yd, y), S_NULL);
  assert_int_equal(dn.Fwd(NULL, &one, s.xd, x, s.wd, w, s.cd, 0, NULL, 0, &zero, s.yd, y), S_NULL);
  assert_int_equal(dn.Fwd(h, &one, s.xd, x, s.wd, w, s.cd, 9, NULL, 0, &zero, s.yd, y), S_BAD);
  assert_int_equal(dn.Fwd(h, &one, s.xd, x, s.wd, w, s.cd, 0, NULL, 0, &zero, s.yd, y), S_OK);
  tdesc_t t;
  assert_int_equal(dn.CreateTensor(&t), S_OK);
  /* Never set. */
  assert_int_equal(dn.Fwd(h, &one, t, x, s.wd, w, s.cd, 0, NULL, 0, &zero, s.yd, y), S_BAD);
  /* y of the wrong size. */
  assert_int_equal(dn.SetTensor4d(t, NCHW, FLOAT, 2, 6, 6, 5), S_OK);
  assert_int_equal(dn.Fwd(h, &one, s.xd, x, s.wd, w, s.cd, 0, NULL, 0, &zero, t, y), S_BAD);
  /* y of another type. */
  assert_int_equal(dn.SetTensor4d(t, NCHW, DOUBLE, 2, 6, 6, 6), S_OK);
  assert_int_equal(dn.Fwd(h, &one, s.xd, x, s.wd, w, s.cd, 0, NULL, 0, &zero, t, y), S_BAD);
  /* x with 3 channels for 2 groups of 2: channel mismatch. */
  assert_int_equal(dn.SetTensor4d(t, NCHW, FLOAT, 2, 3, 6, 6), S_OK);
  assert_int_equal(dn.Fwd(h, &one, t, x, s.wd, w, s.cd, 0, NULL, 0, &zero, s.yd, y), S_BAD);
  /* Negative strides: not supported. */
  int dims[4] = {2, 4, 6, 6}, neg[4] = {144, 36, 6, -1};
  assert_int_equal(dn.SetTensorNd(t, FLOAT, 4, dims, neg), S_OK);
  assert_int_equal(dn.Fwd(h, &one, t, x, s.wd, w, s.cd, 0, NULL, 0, &zero, s.yd, y), S_NOTSUP);
  /* 3-D tensors and a 1-D convolution: not 4 or 5 dimensions. */
  int d3[3] = {2, 4, 6}, s3[3] = {24, 6, 1}, k3[3] = {6, 2, 3}, p1 = 0, u1 = 1;
  tdesc_t y3;
  fdesc_t w3;
  cdesc_t c3;
  assert_int_equal(dn.SetTensorNd(t, FLOAT, 3, d3, s3), S_OK);
  assert_int_equal(dn.CreateTensor(&y3), S_OK);
  int dy3[3] = {2, 6, 4};
  assert_int_equal(dn.SetTensorNd(y3, FLOAT, 3, dy3, s3), S_OK);
  assert_int_equal(dn.CreateFilter(&w3), S_OK);
  assert_int_equal(dn.SetFilterNd(w3, FLOAT, NCHW, 3, k3), S_OK);
  assert_int_equal(dn.CreateConv(&c3), S_OK);
  assert_int_equal(dn.SetConvNd(c3, 1, &p1, &u1, &u1, XCORR, FLOAT), S_OK);
  assert_int_equal(dn.SetGroups(c3, 2), S_OK);
  assert_int_equal(dn.Fwd(h, &one, t, x, w3, w, c3, 0, NULL, 0, &zero, y3, y), S_NOTSUP);
  /* 7 output channels for 2 groups: BAD_PARAM forward, NOT_SUPPORTED backward. */
  int k7[4] = {7, 2, 3, 3};
  assert_int_equal(dn.SetFilterNd(w3, FLOAT, NCHW, 4, k7), S_OK);
  assert_int_equal(dn.Fwd(h, &one, s.xd, x, w3, w, s.cd, 0, NULL, 0, &zero, s.yd, y), S_BAD);
  assert_int_equal(dn.Data(h, &one, w3, w, s.yd, y, s.cd, 0, NULL, 0, &zero, s.xd, x), S_NOTSUP);
  /* A filter wider than the padded input. */
  int kbig[4] = {6, 2, 9, 3};
  assert_int_equal(dn.SetFilterNd(w3, FLOAT, NCHW, 4, kbig), S_OK);
  assert_int_equal(dn.Fwd(h, &one, s.xd, x, w3, w, s.cd, 0, NULL, 0, &zero, s.yd, y), S_BAD);
  /* The handle's context not current. */
  CUcontext ctx;
  assert_int_equal(fk.CtxPopCurrent(&ctx), CUDA_SUCCESS);
  assert_int_equal(dn.Fwd(h, &one, s.xd, x, s.wd, w, s.cd, 0, NULL, 0, &zero, s.yd, y), S_BAD);
  assert_int_equal(fk.CtxPushCurrent(ctx), CUDA_SUCCESS);
  /* A destroyed descriptor. */
  assert_int_equal(dn.DestroyTensor(y3), S_OK);
  assert_int_equal(dn.Fwd(h, &one, s.xd, x, s.wd, w, s.cd, 0, NULL, 0, &zero, y3, y), S_BAD);
  assert_true(strstr(dn.last_error(), "not a live") != NULL);
  assert_int_equal(dn.DestroyTensor(t), S_OK);
  assert_int_equal(dn.DestroyFilter(w3), S_OK);
  assert_int_equal(dn.DestroyConv(c3), S_OK);
  assert_int_equal(fk.CtxSynchronize(), CUDA_SUCCESS);
  conv_down(&s);
  assert_int_equal(dn.Destroy(h), S_OK);
}

static void descriptor_rules(void **state) {
  (void)state;
  NEED();
  tdesc_t t;
  fdesc_t f;
  cdesc_t c;
  pdesc_t p;
  assert_int_equal(dn.CreateTensor(NULL), S_NULL);
  assert_int_equal(dn.CreateTensor(&t), S_OK);
  assert_int_equal(dn.SetTensor4d(t, NCHW, FLOAT, 2, 0, 3, 3), S_BAD);
  assert_int_equal(dn.SetTensor4d(t, NCHW, 99, 2, 1, 3, 3), S_BAD);
  assert_int_equal(dn.SetTensor4d(t, 7, FLOAT, 2, 1, 3, 3), S_BAD);
  assert_int_equal(dn.SetTensor4d(t, 2, FLOAT, 2, 1, 3, 3), 3004); /* NCHW_VECT_C: not modelled */
  int d2[2] = {2, 3}, s2[2] = {3, 1}, d9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  assert_int_equal(dn.SetTensorNd(t, FLOAT, 2, d2, s2), S_BAD);
  assert_int_equal(dn.SetTensorNd(t, FLOAT, 9, d9, d9), S_NOTSUP);
  /* NHWC strides from the 4-D form, read back. */
  assert_int_equal(dn.SetTensor4d(t, NHWC, FLOAT, 2, 3, 4, 5), S_OK);
  int dt_, nb, dims[5], strides[5];
  assert_int_equal(dn.GetTensorNd(t, 5, &dt_, &nb, dims, strides), S_OK);
  assert_int_equal(nb, 4);
  assert_int_equal(strides[0], 60), assert_int_equal(strides[1], 1), assert_int_equal(strides[2], 15), assert_int_equal(strides[3], 3);
  size_t bytes;
  assert_int_equal(dn.TensorBytes(t, &bytes), S_OK);
  assert_int_equal(bytes, 2 * 3 * 4 * 5 * 4);
  /* NHWC in 5-D through the Nd form: C innermost, then W, H, D. */
  int d5[5] = {2, 3, 4, 5, 6};
  assert_int_equal(dn.SetTensorNdEx(t, NHWC, FLOAT, 5, d5), S_OK);
  assert_int_equal(dn.GetTensorNd(t, 5, &dt_, &nb, dims, strides), S_OK);
  assert_int_equal(nb, 5);
  assert_int_equal(strides[1], 1), assert_int_equal(strides[4], 3), assert_int_equal(strides[3], 18);
  assert_int_equal(strides[2], 90), assert_int_equal(strides[0], 360);
  assert_int_equal(dn.SetTensor4dEx(t, FLOAT, 1, 2, 2, 2, 100, 10, 4, 1), S_OK);
  assert_int_equal(dn.TensorBytes(t, &bytes), S_OK);
  assert_int_equal(bytes, (10 + 4 + 1 + 1) * 4);
  assert_int_equal(dn.CreateFilter(&f), S_OK);
  assert_int_equal(dn.SetFilter4d(f, FLOAT, NCHW, 0, 1, 1, 1), S_BAD);
  assert_int_equal(dn.SetFilterNd(f, FLOAT, NCHW, 2, d2), S_BAD);
  assert_int_equal(dn.CreateConv(&c), S_OK);
  assert_int_equal(dn.SetConv2d(c, -1, 0, 1, 1, 1, 1, XCORR, FLOAT), S_BAD);
  assert_int_equal(dn.SetConv2d(c, 0, 0, 0, 1, 1, 1, XCORR, FLOAT), S_BAD);
  assert_int_equal(dn.SetConv2d(c, 0, 0, 1, 1, 1, 0, XCORR, FLOAT), S_BAD);
  assert_int_equal(dn.SetConv2d(c, 0, 0, 1, 1, 1, 1, 2, FLOAT), S_BAD);
  int pads[7] = {0}, ones[7] = {1, 1, 1, 1, 1, 1, 1};
  assert_int_equal(dn.SetConvNd(c, 0, pads, ones, ones, XCORR, FLOAT), S_BAD);
  assert_int_equal(dn.SetConvNd(c, 7, pads, ones, ones, XCORR, FLOAT), S_NOTSUP);
  assert_int_equal(dn.SetGroups(c, 0), S_BAD);
  assert_int_equal(dn.SetMath(c, 4), S_BAD);
  /* The output size: 1 + (in + 2 pad - ((k - 1) dilation + 1)) / stride. */
  assert_int_equal(dn.SetConv2d(c, 1, 2, 2, 3, 2, 1, XCORR, FLOAT), S_OK);
  assert_int_equal(dn.SetTensor4d(t, NCHW, FLOAT, 2, 4, 9, 10), S_OK);
  assert_int_equal(dn.SetFilter4d(f, FLOAT, NCHW, 5, 4, 3, 3), S_OK);
  int out[4];
  assert_int_equal(dn.ConvOutDim(c, t, f, 4, out), S_OK);
  assert_int_equal(out[0], 2), assert_int_equal(out[1], 5);
  assert_int_equal(out[2], 1 + (9 + 2 - 5) / 2), assert_int_equal(out[3], 1 + (10 + 4 - 3) / 3);
  assert_int_equal(dn.ConvOutDim(c, t, f, 5, out), S_BAD);
  assert_int_equal(dn.SetGroups(c, 3), S_OK);
  assert_int_equal(dn.ConvOutDim(c, t, f, 4, out), S_BAD); /* 4 channels, 4 per group, 3 groups */
  assert_int_equal(dn.CreatePool(&p), S_OK);
  int win[2] = {2, 3}, pad[2] = {1, 1}, st[2] = {2, 1}, zero[2] = {0, 0}, big[2] = {2, 3};
  assert_int_equal(dn.SetPoolNd(p, 4, 0, 2, win, pad, st), S_BAD);
  assert_int_equal(dn.SetPoolNd(p, POOL_MAX, 0, 2, zero, pad, st), S_BAD);
  assert_int_equal(dn.SetPoolNd(p, POOL_MAX, 0, 2, win, big, st), S_BAD); /* padding as wide as the window */
  assert_int_equal(dn.SetPoolNd(p, POOL_MAX, 0, 2, win, pad, st), S_OK);
  assert_int_equal(dn.PoolOutDim(p, t, 4, out), S_OK);
  assert_int_equal(out[2], 1 + (9 + 2 - 2) / 2), assert_int_equal(out[3], 1 + (10 + 2 - 3) / 1);
  assert_int_equal(dn.live_descriptors(), 4);
  assert_int_equal(dn.DestroyPool(p), S_OK);
  assert_int_equal(dn.DestroyConv(c), S_OK);
  assert_int_equal(dn.DestroyFilter(f), S_OK);
  assert_int_equal(dn.DestroyTensor(t), S_OK);
  assert_int_equal(dn.DestroyTensor(t), S_BAD); /* twice */
  assert_int_equal(dn.DestroyTensor(NULL), S_OK);
}

/* Leak counts go up and down with every kind, and reset frees. */
static void leak_counts(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  assert_int_equal(dn.live_handles(), 1);
  tdesc_t t[3];
  for (int i = 0; i < 3; i++) assert_int_equal(dn.CreateTensor(&t[i]), S_OK);
  fdesc_t f;
  assert_int_equal(dn.CreateFilter(&f), S_OK);
  assert_int_equal(dn.live_descriptors(), 4);
  assert_int_equal(dn.DestroyTensor(t[1]), S_OK);
  assert_int_equal(dn.live_descriptors(), 3);
  assert_int_equal(dn.DestroyFilter(t[0]), S_BAD); /* a tensor is no filter */
  dn.reset();
  assert_int_equal(dn.live_descriptors(), 0);
  assert_int_equal(dn.live_handles(), 0);
  (void)h;
}

/* ----------------------------------------------- versions and devices --- */

static void versions_and_error_strings(void **state) {
  (void)state;
  NEED();
  assert_int_equal(dn.GetVersion(), 91900);
  assert_int_equal(dn.GetCudartVersion(), 13000);
  assert_string_equal(dn.GetErrorString(2000), "CUDNN_STATUS_BAD_PARAM");
  assert_string_equal(dn.GetErrorString(3007), "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH");
  assert_string_equal(dn.GetErrorString(4003), "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED");
  assert_string_equal(dn.GetErrorString(77), "CUDNN_UNKNOWN_STATUS");
  setenv("FAKECUDNN_VERSION", "9.10.2", 1);
  assert_int_equal(dn.GetVersion(), 91002);
  assert_int_equal(dn.GetCudartVersion(), 12090);
  setenv("FAKECUDNN_VERSION", "8.9.7", 1);
  assert_int_equal(dn.GetVersion(), 8907);
  assert_string_equal(dn.GetErrorString(3), "CUDNN_STATUS_BAD_PARAM");
  assert_string_equal(dn.GetErrorString(9), "CUDNN_STATUS_NOT_SUPPORTED");
  setenv("FAKECUDNN_CUDART", "11080", 1);
  assert_int_equal(dn.GetCudartVersion(), 11080);
  setenv("FAKECUDNN_VERSION", "7.6.5", 1);
  assert_int_equal(dn.GetVersion(), 0);
  assert_true(strstr(dn.config_error(), "FAKECUDNN_VERSION") != NULL);
  tdesc_t t;
  assert_int_equal(dn.CreateTensor(&t), S_NOT_INIT);
  setenv("FAKECUDNN_VERSION", "9.x", 1);
  assert_true(strstr(dn.config_error(), "MAJOR.MINOR.PATCH") != NULL);
}

/* cudnnCreate: the lowest CC of each version, the driver too old for the
 * runtime it was built with, no cuInit, no current context. */
static void create_refuses_old_gpus_and_drivers(void **state) {
  (void)state;
  NEED();
  hnd_t h = NULL;
  /* 9.19: CC 7.5 and up. */
  assert_int_equal(fake_init_with("7.0", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  assert_int_equal(dn.Create(&h), S_ARCH);
  assert_true(strstr(dn.last_error(), "7.5") != NULL);
  setenv("FAKECUDNN_VERSION", "9.10.2", 1);
  assert_int_equal(dn.Create(&h), S_OK);
  assert_int_equal(dn.Destroy(h), S_OK);
  assert_int_equal(fake_init_with("3.7,5.0", NULL), CUDA_SUCCESS);
  fake_use_device(0);
  assert_int_equal(dn.Create(&h), S_ARCH);
  setenv("FAKECUDNN_VERSION", "8.9.7", 1);
  assert_int_equal(dn.Create(&h), 6); /* cuDNN 8's ARCH_MISMATCH */
  CUcontext ctx;
  assert_int_equal(fk.CtxPopCurrent(&ctx), CUDA_SUCCESS);
  fake_use_device(1);
  assert_int_equal(dn.Create(&h), S_OK);
  assert_int_equal(dn.Destroy(h), S_OK);
  /* 9.19 is built with CUDA 13: a 12.8 driver cannot run it; 9.10.2's
   * CUDA 12.9 runtime runs on a 12.0 driver (minor-version compatibility). */
  unsetenv("FAKECUDNN_VERSION");
  assert_int_equal(fake_init_with("9.0", "12080"), CUDA_SUCCESS);
  fake_use_device(0);
  assert_int_equal(dn.Create(&h), S_DRIVER);
  setenv("FAKECUDNN_VERSION", "9.10.2", 1);
  assert_int_equal(fake_init_with("9.0", "12000"), CUDA_SUCCESS);
  fake_use_device(0);
  assert_int_equal(dn.Create(&h), S_OK);
  assert_int_equal(dn.Destroy(h), S_OK);
  /* No current context; the driver not initialised. */
  assert_int_equal(fk.CtxPopCurrent(&ctx), CUDA_SUCCESS);
  assert_int_equal(dn.Create(&h), S_NOT_INIT);
  fk.reset();
  assert_int_equal(dn.Create(&h), S_NOT_INIT);
  assert_int_equal(dn.Create(NULL), S_NULL);
}

/* A process without libcuda: cudnnCreate says NOT_INITIALIZED; the
 * version still answers (run in a child, see main). */
static int child_without_driver(void) {
  void *lib = dlopen(getenv("FAKECUDNN_LIB"), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 2;
  size_t (*version)(void) = (size_t(*)(void))dlsym(lib, "cudnnGetVersion");
  st_t (*create)(hnd_t *) = (st_t(*)(hnd_t *))dlsym(lib, "cudnnCreate");
  if (!version || !create || dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) return 3;
  hnd_t h = NULL;
  return version() == 91900 && create(&h) == S_NOT_INIT && h == NULL ? 0 : 1;
}

static void create_without_a_driver(void **state) {
  (void)state;
  NEED();
  assert_int_equal(ts_run_self("--child-without-driver", "FAKECUDNN_CHILD", "1"), 0);
}

static void handles_and_streams(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0"), h2 = NULL;
  assert_int_equal(dn.Create(&h2), S_OK);
  assert_int_equal(dn.live_handles(), 2);
  CUstream s = NULL, got = (CUstream)1;
  assert_int_equal(fk.StreamCreate(&s, 1), CUDA_SUCCESS);
  assert_int_equal(dn.GetStream(h, &got), S_OK);
  assert_null(got);
  assert_int_equal(dn.SetStream(h, s), S_OK);
  assert_int_equal(dn.GetStream(h, &got), S_OK);
  assert_ptr_equal(got, s);
  assert_int_equal(dn.GetStream(h, NULL), S_NULL);
  assert_int_equal(dn.Destroy(h2), S_OK);
  assert_int_equal(dn.Destroy(h2), S_BAD);
  assert_int_equal(dn.SetStream(h2, s), S_BAD);
  assert_int_equal(dn.Destroy(h), S_OK);
  assert_int_equal(fk.StreamDestroy(s), CUDA_SUCCESS);
}

/* Calls from several threads at once (one lock inside): each thread makes
 * and destroys descriptors and runs convolutions on its own handle and
 * stream; the counts come out exact and nothing leaks. */
typedef struct thread_job {
  CUcontext ctx;
  int failures;
} thread_job;

static void *thread_body(void *arg) {
  thread_job *j = arg;
  if (fk.CtxPushCurrent(j->ctx) != CUDA_SUCCESS) return (void *)1;
  hnd_t h = NULL;
  CUstream st = NULL;
  j->failures += dn.Create(&h) != S_OK;
  j->failures += fk.StreamCreate(&st, 1) != CUDA_SUCCESS;
  j->failures += dn.SetStream(h, st) != S_OK;
  int dims[4] = {1, 2, 4, 4}, strides[4] = {32, 16, 4, 1}, k[4] = {2, 2, 3, 3}, pad[2] = {1, 1}, one[2] = {1, 1};
  CUdeviceptr x = 0, w = 0, y = 0;
  j->failures += fk.MemAlloc(&x, 128) != CUDA_SUCCESS;
  j->failures += fk.MemAlloc(&w, 144) != CUDA_SUCCESS;
  j->failures += fk.MemAlloc(&y, 128) != CUDA_SUCCESS;
  float alpha = 1, beta = 0;
  for (int i = 0; i < 400; i++) {
    tdesc_t xd = NULL;
    fdesc_t wd = NULL;
    cdesc_t cd = NULL;
    j->failures += dn.CreateTensor(&xd) != S_OK;
    j->failures += dn.SetTensorNd(xd, FLOAT, 4, dims, strides) != S_OK;
    j->failures += dn.CreateFilter(&wd) != S_OK;
    j->failures += dn.SetFilterNd(wd, FLOAT, NCHW, 4, k) != S_OK;
    j->failures += dn.CreateConv(&cd) != S_OK;
    j->failures += dn.SetConvNd(cd, 2, pad, one, one, XCORR, FLOAT) != S_OK;
    j->failures += dn.Fwd(h, &alpha, xd, P(x), wd, P(w), cd, 0, NULL, 0, &beta, xd, P(y)) != S_OK;
    j->failures += dn.DestroyTensor(xd) != S_OK;
    j->failures += dn.DestroyFilter(wd) != S_OK;
    j->failures += dn.DestroyConv(cd) != S_OK;
  }
  j->failures += fk.StreamSynchronize(st) != CUDA_SUCCESS;
  j->failures += dn.Destroy(h) != S_OK;
  j->failures += fk.StreamDestroy(st) != CUDA_SUCCESS;
  fk.MemFree(x), fk.MemFree(w), fk.MemFree(y);
  return NULL;
}

static void calls_from_several_threads(void **state) {
  (void)state;
  NEED();
  assert_int_equal(fake_init_with("9.0", NULL), CUDA_SUCCESS);
  CUcontext ctx = fake_use_device(0);
  pthread_t t[4];
  thread_job jobs[4];
  for (int i = 0; i < 4; i++) {
    jobs[i] = (thread_job){ctx, 0};
    assert_int_equal(pthread_create(&t[i], NULL, thread_body, &jobs[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    void *r = NULL;
    assert_int_equal(pthread_join(t[i], &r), 0);
    assert_null(r);
    assert_int_equal(jobs[i].failures, 0);
  }
  assert_int_equal(dn.call_count("cudnnConvolutionForward"), 1600);
  assert_int_equal(dn.call_count("cudnnCreateTensorDescriptor"), 1600);
  assert_int_equal(dn.live_descriptors(), 0);
  assert_int_equal(dn.live_handles(), 0);
}

/* -------------------------------------------------- stream and memory --- */

/* Work runs on the handle's stream, in order, at the stream's
 * synchronisation: a copy on the legacy stream does not wait for a
 * non-blocking stream, so it reads the old contents; cudnnDestroy
 * synchronises. */
static void work_runs_in_stream_order(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  CUstream st;
  assert_int_equal(fk.StreamCreate(&st, 1), CUDA_SUCCESS);
  assert_int_equal(dn.SetStream(h, st), S_OK);
  conv_case cc = {"stream", 2, 1, 2, 2, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  double *x = values(41, s.x.count), *w = values(42, s.w.count);
  dt_write(&s.x, x), dt_write(&s.w, w), dt_write(&s.y, NULL);
  size_t pending = fk.pending_ops();
  assert_int_equal(run_dir(h, &s, FWD, 0, 1.0, 0.0), S_OK);
  /* Then add y into itself on the same stream: it must see the convolution. */
  float one = 1, zero = 0, two = 2;
  (void)zero;
  assert_int_equal(dn.AddTensor(h, &one, s.yd, P(s.y.p), &one, s.yd, P(s.y.p)), S_OK);
  assert_true(fk.pending_ops() >= pending + 2);
  double *early = dt_read(&s.y); /* legacy stream: does not wait */
  assert_true(isnan(early[0]));
  assert_int_equal(fk.StreamSynchronize(st), CUDA_SUCCESS);
  double *want = malloc((size_t)s.y.count * sizeof *want), *mag = malloc((size_t)s.y.count * sizeof *mag);
  reference(&cc, FWD, x, w, NULL, want, mag);
  double *got = dt_read(&s.y);
  for (long i = 0; i < s.y.count; i++) assert_true(fabs(got[i] - 2 * want[i]) < 1e-5);
  /* cudnnSetTensor on the stream, then cudnnDestroy runs it. */
  assert_int_equal(dn.SetTensorValue(h, s.yd, P(s.y.p), &two), S_OK);
  assert_true(fk.pending_ops() > 0);
  assert_int_equal(dn.Destroy(h), S_OK);
  assert_int_equal(fk.pending_ops(), 0);
  free(got);
  got = dt_read(&s.y);
  for (long i = 0; i < s.y.count; i++) assert_true(got[i] == 2.0);
  free(early), free(got), free(want), free(mag), free(x), free(w);
  conv_down(&s);
  assert_int_equal(fk.StreamDestroy(st), CUDA_SUCCESS);
}

/* An operand outside its allocation, freed or on the host: the call
 * returns success, the synchronisation fails like a faulting kernel, with
 * the double's message naming the call and the operand. */
static void bad_operands_fail_at_the_synchronisation(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  conv_case cc = {"oob", 2, 1, 2, 2, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  float one = 1, zero = 0;
  CUdeviceptr small = dalloc((size_t)s.y.span * 4 - 4);
  assert_int_equal(dn.Fwd(h, &one, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, 0, NULL, 0, &zero, s.yd, P(small)), S_OK);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_true(strstr(fk.last_error(), "cudnnConvolutionForward: operand y") != NULL);
  assert_true(strstr(fk.last_error(), "past the end") != NULL);
  assert_int_equal(dn.Destroy(h), S_OK);
  /* A fresh context: a freed x; a host x. */
  h = up("9.0");
  conv_setup s2 = conv_up(&cc);
  CUdeviceptr gone = dalloc(256);
  dfree(gone);
  assert_int_equal(dn.Fwd(h, &one, s2.xd, P(gone), s2.wd, P(s2.w.p), s2.cd, 0, NULL, 0, &zero, s2.yd, P(s2.y.p)), S_OK);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_true(strstr(fk.last_error(), "operand x") != NULL);
  /* The context is faulted: the next call cannot issue work. */
  assert_int_equal(dn.Fwd(h, &one, s2.xd, P(s2.x.p), s2.wd, P(s2.w.p), s2.cd, 0, NULL, 0, &zero, s2.yd, P(s2.y.p)),
                   S_EXEC_DRIVER);
  assert_int_equal(dn.Destroy(h), S_OK);
  h = up("9.0");
  conv_setup s3 = conv_up(&cc);
  static float host_x[64];
  assert_int_equal(dn.Fwd(h, &one, s3.xd, host_x, s3.wd, P(s3.w.p), s3.cd, 0, NULL, 0, &zero, s3.yd, P(s3.y.p)), S_OK);
  assert_int_equal(fk.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  assert_true(strstr(fk.last_error(), "operand x") != NULL);
  /* The descriptors outlive the contexts; free them. */
  dn.reset();
}

/* ------------------------------------------------------- faults, v8 ---- */

static void fault_injection(void **state) {
  (void)state;
  NEED();
  setenv("FAKECUDNN_FAIL", "cudnnConvolutionForward=3000@2,cudnnCreateFilterDescriptor=4003", 1);
  hnd_t h = up("9.0");
  fdesc_t f = NULL;
  assert_int_equal(dn.CreateFilter(&f), S_ALLOC);
  assert_null(f);
  unsetenv("FAKECUDNN_FAIL");
  conv_case cc = {"fail", 2, 1, 2, 2, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  setenv("FAKECUDNN_FAIL", "cudnnConvolutionForward=3000@2", 1);
  dt_write(&s.x, NULL), dt_write(&s.y, NULL);
  double *x = values(51, s.x.count), *w = values(52, s.w.count);
  dt_write(&s.x, x), dt_write(&s.w, w);
  assert_int_equal(run_dir(h, &s, FWD, 0, 1.0, 0.0), S_OK);
  dt_write(&s.y, NULL);
  assert_int_equal(run_dir(h, &s, FWD, 0, 1.0, 0.0), S_NOTSUP); /* the second call */
  assert_true(strstr(dn.last_error(), "FAKECUDNN_FAIL") != NULL);
  double *y = dt_read(&s.y);
  assert_true(isnan(y[0])); /* nothing ran */
  assert_int_equal(run_dir(h, &s, FWD, 0, 1.0, 0.0), S_OK);
  assert_int_equal(dn.call_count("cudnnConvolutionForward"), 3);
  setenv("FAKECUDNN_FAIL", "cudnnGetVersion=2000", 1);
  assert_true(strstr(dn.config_error(), "returns no status") != NULL);
  setenv("FAKECUDNN_FAIL", "cudnnNoSuchThing=2000", 1);
  assert_true(strstr(dn.config_error(), "not an entry point") != NULL);
  setenv("FAKECUDNN_FAIL", "cudnnCreate=0", 1);
  assert_true(strstr(dn.config_error(), "non-zero") != NULL);
  unsetenv("FAKECUDNN_FAIL");
  free(x), free(w), free(y);
  conv_down(&s);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* Pretending to be cuDNN 8.9.7: its numbers, in returns and in records. */
static void cudnn8_numbering(void **state) {
  (void)state;
  NEED();
  setenv("FAKECUDNN_VERSION", "8.9.7", 1);
  hnd_t h = up("8.0");
  conv_case cc = {"v8", 2, 1, 2, 2, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, XCORR, 0, FLOAT};
  conv_setup s = conv_up(&cc);
  size_t ws;
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 3, &ws), 9);
  assert_int_equal(dn.FwdWs(h, s.xd, s.wd, s.cd, s.yd, 2, NULL), 3);
  perf_t perf[8];
  int n;
  assert_int_equal(dn.FwdFind(h, s.xd, P(s.x.p), s.wd, P(s.w.p), s.cd, s.yd, P(s.y.p), 8, &n, perf, NULL, 0), S_OK);
  for (int i = 0; i < n; i++) assert_true(perf[i].status == 0 || perf[i].status == 2 || perf[i].status == 9);
  conv_down(&s);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* ------------------------------------------------------------ pooling --- */

typedef struct pool_case {
  int nsp, n, c, in[3], win[3], pad[3], stride[3], mode, nhwc;
} pool_case;

static void pool_sizes(const pool_case *pc, int *out) {
  for (int i = 0; i < 3; i++)
    out[i] = i < pc->nsp ? 1 + (pc->in[i] + 2 * pc->pad[i] - pc->win[i]) / pc->stride[i] : 1;
}

/* The pooling reference: forward values and backward gradients (the first
 * maximal element of a window takes a max output's gradient). */
static void pool_reference(const pool_case *pc, const double *x, const double *dy, double *y, double *dx) {
  int o[3], in[3], win[3], pad[3], st[3];
  pool_sizes(pc, o);
  for (int i = 0; i < 3; i++) {
    int u = i < pc->nsp;
    in[i] = u ? pc->in[i] : 1, win[i] = u ? pc->win[i] : 1, pad[i] = u ? pc->pad[i] : 0, st[i] = u ? pc->stride[i] : 1;
  }
  long nx = (long)pc->n * pc->c * in[0] * in[1] * in[2];
  if (dx) memset(dx, 0, (size_t)nx * sizeof *dx);
  long yi = 0;
  for (int n = 0; n < pc->n; n++)
    for (int c = 0; c < pc->c; c++)
      for (int a = 0; a < o[0]; a++)
        for (int b = 0; b < o[1]; b++)
          for (int e = 0; e < o[2]; e++, yi++) {
            double best = -INFINITY, sum = 0;
            long arg = -1, cnt = 0;
            for (int t0 = 0; t0 < win[0]; t0++)
              for (int t1 = 0; t1 < win[1]; t1++)
                for (int t2 = 0; t2 < win[2]; t2++) {
                  int i0 = a * st[0] - pad[0] + t0, i1 = b * st[1] - pad[1] + t1, i2 = e * st[2] - pad[2] + t2;
                  if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                  long xi = (((long)n * pc->c + c) * in[0] + i0) * in[1] * in[2] + (long)i1 * in[2] + i2;
                  cnt++;
                  sum += x[xi];
                  if (x[xi] > best) best = x[xi], arg = xi;
                }
            int is_max = pc->mode == POOL_MAX || pc->mode == POOL_MAX_DET;
            double div = pc->mode == POOL_AVG_INC ? (double)win[0] * win[1] * win[2] : (double)cnt;
            y[yi] = is_max ? best : sum / div;
            if (!dx) continue;
            if (is_max) {
              dx[arg] += dy[yi];
              continue;
            }
            for (int t0 = 0; t0 < win[0]; t0++)
              for (int t1 = 0; t1 < win[1]; t1++)
                for (int t2 = 0; t2 < win[2]; t2++) {
                  int i0 = a * st[0] - pad[0] + t0, i1 = b * st[1] - pad[1] + t1, i2 = e * st[2] - pad[2] + t2;
                  if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
                  dx[(((long)n * pc->c + c) * in[0] + i0) * in[1] * in[2] + (long)i1 * in[2] + i2] += dy[yi] / div;
                }
          }
}

/* Runs a pooling case both ways against the reference; x may have ties. */
static void check_pool(hnd_t h, const pool_case *pc, const double *x) {
  int o[3], xs[5] = {pc->n, pc->c}, ys[5] = {pc->n, pc->c}, nb = pc->nsp + 2;
  pool_sizes(pc, o);
  for (int i = 0; i < pc->nsp; i++) xs[2 + i] = pc->in[i], ys[2 + i] = o[i];
  dt tx = make_dt(nb, xs, pc->nhwc, FLOAT), ty = make_dt(nb, ys, pc->nhwc, FLOAT);
  dt tdy = make_dt(nb, ys, pc->nhwc, FLOAT), tdx = make_dt(nb, xs, pc->nhwc, FLOAT);
  tdesc_t xd = tensor_desc(&tx), yd = tensor_desc(&ty);
  pdesc_t p;
  assert_int_equal(dn.CreatePool(&p), S_OK);
  assert_int_equal(dn.SetPoolNd(p, pc->mode, 0, pc->nsp, pc->win, pc->pad, pc->stride), S_OK);
  double *dy = values(61, ty.count), *want_y = malloc((size_t)ty.count * 8), *want_dx = malloc((size_t)tx.count * 8);
  dt_write(&tx, x), dt_write(&ty, NULL), dt_write(&tdy, dy), dt_write(&tdx, NULL);
  double *rx = dt_read(&tx);
  pool_reference(pc, rx, dy, want_y, want_dx);
  float one = 1, zero = 0;
  assert_int_equal(dn.PoolFwd(h, p, &one, xd, P(tx.p), &zero, yd, P(ty.p)), S_OK);
  double *y = dt_read(&ty);
  for (long i = 0; i < ty.count; i++) assert_true(fabs(y[i] - want_y[i]) < 1e-6);
  assert_int_equal(dn.PoolBwd(h, p, &one, yd, P(ty.p), yd, P(tdy.p), xd, P(tx.p), &zero, xd, P(tdx.p)), S_OK);
  double *dx = dt_read(&tdx);
  for (long i = 0; i < tx.count; i++)
    if (!(fabs(dx[i] - want_dx[i]) < 1e-6)) {
      fprintf(stderr, "pooling mode %d: dx[%ld] = %g, want %g\n", pc->mode, i, dx[i], want_dx[i]);
      fail();
    }
  free(dy), free(want_y), free(want_dx), free(rx), free(y), free(dx);
  assert_int_equal(dn.DestroyPool(p), S_OK);
  assert_int_equal(dn.DestroyTensor(xd), S_OK);
  assert_int_equal(dn.DestroyTensor(yd), S_OK);
  dfree(tx.p), dfree(ty.p), dfree(tdy.p), dfree(tdx.p);
}

static void pooling_both_ways(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  const pool_case cases_[] = {
      {2, 2, 3, {6, 7}, {3, 2}, {1, 1}, {2, 2}, POOL_MAX_DET, 0},
      {2, 2, 3, {6, 7}, {3, 2}, {1, 1}, {2, 2}, POOL_MAX, 1},
      {2, 1, 2, {5, 5}, {3, 3}, {1, 1}, {1, 1}, POOL_AVG_INC, 0},
      {2, 1, 2, {5, 5}, {3, 3}, {1, 1}, {1, 1}, POOL_AVG_EXC, 1},
      {3, 1, 2, {4, 5, 4}, {2, 3, 2}, {1, 1, 0}, {2, 1, 2}, POOL_AVG_EXC, 0},
      {3, 1, 2, {4, 5, 4}, {2, 2, 2}, {0, 1, 1}, {1, 2, 1}, POOL_MAX_DET, 1},
  };
  for (size_t i = 0; i < sizeof cases_ / sizeof cases_[0]; i++) {
    long nx = (long)cases_[i].n * cases_[i].c * cases_[i].in[0] * cases_[i].in[1] * (cases_[i].nsp == 3 ? cases_[i].in[2] : 1);
    double *x = values(62 + (unsigned)i, nx);
    /* Ties: every third value repeats its neighbour. */
    for (long j = 1; j < nx; j += 3) x[j] = x[j - 1];
    check_pool(h, &cases_[i], x);
    free(x);
  }
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* Max ties go to the first element of the window; a y that is not in its
 * window sends nothing; NaN follows the NaN option; strides that differ
 * between x and dx are refused. */
static void max_pooling_ties_nan_and_layouts(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  int xs[4] = {1, 1, 2, 2}, ys[4] = {1, 1, 1, 1}, win[2] = {2, 2}, pad[2] = {0, 0}, st[2] = {2, 2};
  dt tx = make_dt(4, xs, 0, FLOAT), ty = make_dt(4, ys, 0, FLOAT), tdy = make_dt(4, ys, 0, FLOAT), tdx = make_dt(4, xs, 0, FLOAT);
  tdesc_t xd = tensor_desc(&tx), yd = tensor_desc(&ty);
  pdesc_t p;
  assert_int_equal(dn.CreatePool(&p), S_OK);
  float one = 1, zero = 0;
  for (int mode = POOL_MAX; mode <= POOL_MAX_DET; mode += 3) {
    assert_int_equal(dn.SetPoolNd(p, mode, 0, 2, win, pad, st), S_OK);
    double x[4] = {1, 5, 5, 2}, g = 3, yv = 5;
    dt_write(&tx, x), dt_write(&tdy, &g), dt_write(&tdx, NULL), dt_write(&ty, &yv);
    assert_int_equal(dn.PoolBwd(h, p, &one, yd, P(ty.p), yd, P(tdy.p), xd, P(tx.p), &zero, xd, P(tdx.p)), S_OK);
    double *dx = dt_read(&tdx);
    assert_true(dx[0] == 0 && dx[1] == 3 && dx[2] == 0 && dx[3] == 0);
    free(dx);
    yv = 4; /* no element of the window: no gradient */
    dt_write(&ty, &yv);
    assert_int_equal(dn.PoolBwd(h, p, &one, yd, P(ty.p), yd, P(tdy.p), xd, P(tx.p), &zero, xd, P(tdx.p)), S_OK);
    dx = dt_read(&tdx);
    for (int i = 0; i < 4; i++) assert_true(dx[i] == 0);
    free(dx);
  }
  double xn[4] = {1, NAN, 3, 2};
  dt_write(&tx, xn);
  assert_int_equal(dn.SetPoolNd(p, POOL_MAX, 1, 2, win, pad, st), S_OK);
  assert_int_equal(dn.PoolFwd(h, p, &one, xd, P(tx.p), &zero, yd, P(ty.p)), S_OK);
  double *y = dt_read(&ty);
  assert_true(isnan(y[0]));
  free(y);
  assert_int_equal(dn.SetPoolNd(p, POOL_MAX, 0, 2, win, pad, st), S_OK);
  assert_int_equal(dn.PoolFwd(h, p, &one, xd, P(tx.p), &zero, yd, P(ty.p)), S_OK);
  y = dt_read(&ty);
  assert_true(y[0] == 3);
  free(y);
  /* dx with other strides than x. */
  tdesc_t other;
  assert_int_equal(dn.CreateTensor(&other), S_OK);
  assert_int_equal(dn.SetTensor4dEx(other, FLOAT, 1, 1, 2, 2, 8, 8, 1, 2), S_OK);
  assert_int_equal(dn.PoolBwd(h, p, &one, yd, P(ty.p), yd, P(tdy.p), xd, P(tx.p), &zero, other, P(tdx.p)), S_BAD);
  /* y of the wrong size. */
  assert_int_equal(dn.PoolFwd(h, p, &one, xd, P(tx.p), &zero, xd, P(tdx.p)), S_BAD);
  assert_int_equal(dn.DestroyTensor(other), S_OK);
  assert_int_equal(dn.DestroyPool(p), S_OK);
  assert_int_equal(dn.DestroyTensor(xd), S_OK);
  assert_int_equal(dn.DestroyTensor(yd), S_OK);
  dfree(tx.p), dfree(ty.p), dfree(tdy.p), dfree(tdx.p);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* -------------------------------------------------------- batch norm --- */

/* Batch normalisation by the formulas of fakecudnn_bn.c's header, derived
 * by hand here for x [n, c, h, w] (NCHW, double). */
typedef struct bn_ref {
  double mean[64], var[64], inv[64];
} bn_ref;

static long bn_group(int spatial, int c, int hw, long i, int *member) {
  long pos = i % hw, ch = (i / hw) % c;
  *member = 1;
  return spatial ? ch : ch * hw + pos;
}

static void bn_stats(int spatial, int n, int c, int hw, const double *x, bn_ref *r, double eps) {
  int groups = spatial ? c : c * hw, m = spatial ? n * hw : n, member;
  double sum[64] = {0}, sq[64] = {0};
  for (long i = 0; i < (long)n * c * hw; i++) sum[bn_group(spatial, c, hw, i, &member)] += x[i];
  for (int g = 0; g < groups; g++) r->mean[g] = sum[g] / m;
  for (long i = 0; i < (long)n * c * hw; i++) {
    long g = bn_group(spatial, c, hw, i, &member);
    sq[g] += (x[i] - r->mean[g]) * (x[i] - r->mean[g]);
  }
  for (int g = 0; g < groups; g++) r->var[g] = sq[g] / m, r->inv[g] = 1 / sqrt(r->var[g] + eps);
}

static void batch_norm_train_infer_backward(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  const int n = 3, c = 2, hh = 2, ww = 3, hw = hh * ww;
  const double eps = 1e-3, factor = 0.25;
  for (int spatial = 0; spatial <= 1; spatial++) {
    int mode = spatial ? BN_SPATIAL : BN_PER_ACT, groups = spatial ? c : c * hw, m = spatial ? n * hw : n, member;
    int xs[4] = {n, c, hh, ww};
    dt tx = make_dt(4, xs, 1, FLOAT), ty = make_dt(4, xs, 1, FLOAT), tdy = make_dt(4, xs, 1, FLOAT), tdx = make_dt(4, xs, 1, FLOAT);
    tdesc_t xd = tensor_desc(&tx), pd;
    assert_int_equal(dn.CreateTensor(&pd), S_OK);
    assert_int_equal(dn.DeriveBN(pd, xd, mode), S_OK);
    int pdt, pnb, pdims[4], pstr[4];
    assert_int_equal(dn.GetTensorNd(pd, 4, &pdt, &pnb, pdims, pstr), S_OK);
    assert_int_equal(pdt, FLOAT);
    assert_int_equal(pdims[2], spatial ? 1 : hh);
    int ps[4] = {1, c, spatial ? 1 : hh, spatial ? 1 : ww};
    dt scale = make_dt(4, ps, 0, FLOAT), bias = make_dt(4, ps, 0, FLOAT), rmean = make_dt(4, ps, 0, FLOAT);
    dt rvar = make_dt(4, ps, 0, FLOAT), smean = make_dt(4, ps, 0, FLOAT), sinv = make_dt(4, ps, 0, FLOAT);
    dt dscale = make_dt(4, ps, 0, FLOAT), dbias = make_dt(4, ps, 0, FLOAT);
    double *x = values(71, tx.count), *sc = values(72, scale.count), *bi = values(73, scale.count);
    double *rm0 = values(74, scale.count), *rv0 = values(75, scale.count), *dy = values(76, tx.count);
    for (int g = 0; g < groups; g++) rv0[g] = fabs(rv0[g]) + 0.5;
    dt_write(&tx, x), dt_write(&scale, sc), dt_write(&bias, bi), dt_write(&rmean, rm0), dt_write(&rvar, rv0);
    dt_write(&ty, NULL), dt_write(&tdy, dy), dt_write(&tdx, NULL);
    double *rx = dt_read(&tx);
    bn_ref r;
    bn_stats(spatial, n, c, hw, rx, &r, eps);
    float one = 1, zero = 0;
    assert_int_equal(dn.BNTrain(h, mode, &one, &zero, xd, P(tx.p), xd, P(ty.p), pd, P(scale.p), P(bias.p), factor,
                                P(rmean.p), P(rvar.p), eps, P(smean.p), P(sinv.p)),
                     S_OK);
    double *y = dt_read(&ty), *rm = dt_read(&rmean), *rv = dt_read(&rvar), *sm = dt_read(&smean), *si = dt_read(&sinv);
    for (long i = 0; i < tx.count; i++) {
      long g = bn_group(spatial, c, hw, i, &member);
      assert_true(fabs(y[i] - ((float)sc[g] * (rx[i] - r.mean[g]) * r.inv[g] + (float)bi[g])) < 1e-5);
    }
    for (int g = 0; g < groups; g++) {
      assert_true(fabs(rm[g] - ((1 - factor) * (float)rm0[g] + factor * r.mean[g])) < 1e-6);
      assert_true(fabs(rv[g] - ((1 - factor) * (float)rv0[g] + factor * r.var[g] * m / (m - 1))) < 1e-5);
      assert_true(fabs(sm[g] - r.mean[g]) < 1e-6);
      assert_true(fabs(si[g] - r.inv[g]) < 1e-4 * r.inv[g]);
    }
    /* Inference with the running statistics, blended with beta 1. */
    double *prior = values(77, tx.count);
    dt_write(&ty, prior);
    assert_int_equal(dn.BNInfer(h, mode, &one, &one, xd, P(tx.p), xd, P(ty.p), pd, P(scale.p), P(bias.p), P(rmean.p),
                                P(rvar.p), eps),
                     S_OK);
    free(y);
    y = dt_read(&ty);
    for (long i = 0; i < tx.count; i++) {
      long g = bn_group(spatial, c, hw, i, &member);
      double want = (float)sc[g] * (rx[i] - rm[g]) / sqrt(rv[g] + eps) + (float)bi[g] + (float)prior[i];
      assert_true(fabs(y[i] - want) < 1e-5);
    }
    /* Backward: with the saved statistics, without them (recomputed from x:
     * the same), and with other saved statistics, which it must use. */
    double *rdy = dt_read(&tdy);
    for (int variant = 0; variant < 3; variant++) {
      double mean[64], inv[64], db[64] = {0}, ds[64] = {0}, nothing[64] = {0};
      for (int g = 0; g < groups; g++) {
        mean[g] = variant == 2 ? (float)(r.mean[g] + 0.25) : r.mean[g];
        inv[g] = variant == 2 ? (float)(r.inv[g] * 1.5) : r.inv[g];
      }
      if (variant == 2) dt_write(&smean, mean), dt_write(&sinv, inv);
      for (long i = 0; i < tx.count; i++) {
        long g = bn_group(spatial, c, hw, i, &member);
        db[g] += rdy[i];
        ds[g] += rdy[i] * (rx[i] - mean[g]) * inv[g];
      }
      float two = 2;
      dt_write(&dscale, sc); /* betaParamDiff 1: added to */
      dt_write(&dbias, nothing);
      int saved = variant != 1;
      assert_int_equal(dn.BNBack(h, mode, &one, &zero, &two, &one, xd, P(tx.p), xd, P(tdy.p), xd, P(tdx.p), pd, P(scale.p),
                                 P(dscale.p), P(dbias.p), eps, saved ? P(smean.p) : NULL, saved ? P(sinv.p) : NULL),
                       S_OK);
      double *dx = dt_read(&tdx), *gs = dt_read(&dscale), *gb = dt_read(&dbias);
      for (long i = 0; i < tx.count; i++) {
        long g = bn_group(spatial, c, hw, i, &member);
        double xhat = (rx[i] - mean[g]) * inv[g];
        double want = (float)sc[g] * inv[g] / m * (m * rdy[i] - db[g] - xhat * ds[g]);
        assert_true(fabs(dx[i] - want) < 1e-4);
      }
      for (int g = 0; g < groups; g++) {
        assert_true(fabs(gs[g] - (2 * ds[g] + (float)sc[g])) < 1e-4);
        assert_true(fabs(gb[g] - 2 * db[g]) < 1e-4);
      }
      free(dx), free(gs), free(gb);
    }
    /* The rules: epsilon below 0, one saved pointer, the wrong parameter shape. */
    assert_int_equal(dn.BNTrain(h, mode, &one, &zero, xd, P(tx.p), xd, P(ty.p), pd, P(scale.p), P(bias.p), factor, NULL,
                                NULL, -1.0, NULL, NULL),
                     S_BAD);
    assert_int_equal(dn.BNTrain(h, mode, &one, &zero, xd, P(tx.p), xd, P(ty.p), pd, P(scale.p), P(bias.p), factor, NULL,
                                NULL, eps, P(smean.p), NULL),
                     S_BAD);
    assert_int_equal(dn.BNTrain(h, mode, &one, &zero, xd, P(tx.p), xd, P(ty.p), xd, P(scale.p), P(bias.p), factor, NULL,
                                NULL, eps, NULL, NULL),
                     S_BAD);
    assert_int_equal(dn.BNInfer(h, mode, &one, &zero, xd, P(tx.p), xd, P(ty.p), pd, P(scale.p), P(bias.p), NULL, P(rvar.p),
                                eps),
                     S_NULL);
    free(x), free(sc), free(bi), free(rm0), free(rv0), free(dy), free(rx), free(y), free(rm), free(rv), free(sm), free(si);
    free(prior), free(rdy);
    assert_int_equal(dn.DestroyTensor(xd), S_OK);
    assert_int_equal(dn.DestroyTensor(pd), S_OK);
    dt *all[] = {&tx, &ty, &tdy, &tdx, &scale, &bias, &rmean, &rvar, &smean, &sinv, &dscale, &dbias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dfree(all[i]->p);
  }
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* --------------------------------------------------------- bias, add --- */

static void backward_bias_and_add_tensor(void **state) {
  (void)state;
  NEED();
  hnd_t h = up("9.0");
  int ys[4] = {2, 3, 2, 2}, bs[4] = {1, 3, 1, 1};
  dt ty = make_dt(4, ys, 1, FLOAT), tb = make_dt(4, bs, 0, FLOAT);
  tdesc_t yd = tensor_desc(&ty), bd = tensor_desc(&tb);
  double *dy = values(81, ty.count), prior[3] = {1, 2, 3};
  dt_write(&ty, dy), dt_write(&tb, prior);
  float one = 1, half = 0.5f;
  assert_int_equal(dn.Bias(h, &one, yd, P(ty.p), &half, bd, P(tb.p)), S_OK);
  double *db = dt_read(&tb), *rdy = dt_read(&ty);
  for (int k = 0; k < 3; k++) {
    double s = 0;
    for (long i = 0; i < ty.count; i++) s += (i / 4) % 3 == k ? rdy[i] : 0;
    assert_true(fabs(db[k] - (s + 0.5 * prior[k])) < 1e-5);
  }
  assert_int_equal(dn.Bias(h, &one, yd, P(ty.p), &half, yd, P(tb.p)), S_BAD);
  /* C += bias broadcast over n, h, w. */
  assert_int_equal(dn.AddTensor(h, &one, bd, P(tb.p), &one, yd, P(ty.p)), S_OK);
  double *y = dt_read(&ty);
  for (long i = 0; i < ty.count; i++) assert_true(fabs(y[i] - (rdy[i] + db[(i / 4) % 3])) < 1e-6);
  assert_int_equal(dn.AddTensor(h, &one, yd, P(ty.p), &one, bd, P(tb.p)), S_BAD);
  free(dy), free(db), free(rdy), free(y);
  assert_int_equal(dn.DestroyTensor(yd), S_OK);
  assert_int_equal(dn.DestroyTensor(bd), S_OK);
  dfree(ty.p), dfree(tb.p);
  assert_int_equal(dn.Destroy(h), S_OK);
}

/* ---------------------------------------------------------------- main --- */

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--child-without-driver")) return child_without_driver();
#define T(name) cmocka_unit_test_setup_teardown(name, test_setup, test_teardown)
  const struct CMUnitTest tests[] = {
      T(versions_and_error_strings),
      T(create_without_a_driver),
      T(create_refuses_old_gpus_and_drivers),
      T(handles_and_streams),
      T(descriptor_rules),
      T(leak_counts),
      T(calls_from_several_threads),
      T(forward_matches_reference),
      T(backward_data_matches_reference),
      T(backward_filter_matches_reference),
      T(forward_matches_shared_reference),
      T(alpha_and_beta_blend),
      T(algorithms_sum_in_their_own_orders),
      T(find_orders_by_time_and_honours_the_workspace),
      T(backward_searches),
      T(find_is_synchronous_and_checks_its_buffers),
      T(heuristic_order),
      T(workspace_sizes_and_too_small_a_workspace),
      T(math_types_round_inputs_as_tensor_cores_do),
      T(half_and_bfloat16),
      T(convolution_bad_params),
      T(work_runs_in_stream_order),
      T(bad_operands_fail_at_the_synchronisation),
      T(fault_injection),
      T(cudnn8_numbering),
      T(pooling_both_ways),
      T(max_pooling_ties_nan_and_layouts),
      T(batch_norm_train_infer_backward),
      T(backward_bias_and_add_tensor),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
