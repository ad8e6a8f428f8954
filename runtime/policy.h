/* The selection policy of DESIGN.md as a pure function: from (compute
 * capability, driver version, embedded images, loadable NVRTCs, overrides) to
 * a plan that lists every candidate with its verdict and reason. No CUDA calls,
 * no environment reads: the caller passes everything in. */
#ifndef EMBER_RUNTIME_POLICY_H
#define EMBER_RUNTIME_POLICY_H

#include <stddef.h>
#include "ember/dispatch.h"

/* One loadable NVRTC library. */
typedef struct em_policy_nvrtc {
  int version;          /* nvrtcVersion as 1000*major+10*minor (11080) */
  const int *archs;     /* SMs it supports (nvrtcGetSupportedArchs); NULL: from arch_table */
  size_t n_archs;
  int has_cubin;        /* nvrtcGetCUBIN resolved (>= 11.1); else it can only make PTX */
} em_policy_nvrtc;

typedef struct em_policy_input {
  int cc;                         /* 10*major+minor: 35, 90, 120, 130 */
  int driver_version;             /* cuDriverGetVersion */
  const char *module;             /* only images of this module are considered */
  const em_image_info *images;    /* the whole image table */
  size_t n_images;
  const em_policy_nvrtc *nvrtc;   /* loadable NVRTC libraries, any order */
  size_t n_nvrtc;
  em_path force;                  /* EM_PATH_NONE, or the only path allowed (EMBER_FORCE) */
  int strict;                     /* EMBER_STRICT=1: ending on the CPU is an error */
  int jit_disabled;               /* CUDA_DISABLE_PTX_JIT=1: PTX cannot be JIT-compiled */
} em_policy_input;

/* Lowest cuDriverGetVersion that can load an image, from the toolkit that made
 * it (cubin: minor-version compatibility within the major for CUDA 11+) or its
 * PTX ISA (PTX: never covered by minor-version compatibility). 0 for sources. */
int em_image_min_driver(const em_image_info *img);

/* Fills *out. Candidates are listed in the order the policy considers them;
 * viable ones are tried in that order by the loader, the first one is the plan. */
void em_policy_plan(const em_policy_input *in, em_plan *out);

#endif
