/* The host builds of Ember's kernels that the test double runs: a table,
 * generated at build time by build-tools/kernel_wrappers.sh from the kernel
 * signatures in the kernels/ sources (and the double's own test kernels), with a
 * wrapper per kernel that unpacks cuLaunchKernel's kernelParams. */
#ifndef FAKECUDA_KERNELS_H
#define FAKECUDA_KERNELS_H

#include <stddef.h>

#define FC_KERNEL_MAX_PARAMS 32

typedef struct fc_kernel_def {
  const char *name;
  /* Calls the kernel's host build; args[i] points at parameter i's value. */
  void (*call)(void *const *args);
  int n_params;
  size_t param_size[FC_KERNEL_MAX_PARAMS];
  unsigned char param_is_ptr[FC_KERNEL_MAX_PARAMS]; /* a device pointer: checked and translated */
  const char *param_name[FC_KERNEL_MAX_PARAMS];
} fc_kernel_def;

extern const fc_kernel_def fc_kernel_defs[];
extern const size_t fc_kernel_def_count;

/* The table entry of a kernel name, or NULL (no host build). */
const fc_kernel_def *fc_kernel_find(const char *name);

#endif
