/* Ember: one library that runs on every NVIDIA GPU generation from Kepler
 * (sm_35) to Blackwell (sm_120), and on the CPU. Include this header. */
#ifndef EMBER_H
#define EMBER_H

#include "ember/status.h"
#include "ember/device.h"
#include "ember/dispatch.h"
#include "ember/runtime.h"
#include "ember/primitives.h"
#include "ember/tensor.h"
#include "ember/graph.h"
#include "ember/exec.h"
#include "ember/layers.h"
#include "ember/learner.h"
#include "ember/trainer.h"
#include "ember/checkpoint.h"
#include "ember/reader.h"
#include "ember/sequence.h"
#include "ember/onnx.h"

#define EMBER_VERSION_MAJOR 0
#define EMBER_VERSION_MINOR 1
#define EMBER_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif
/* "0.1.0" */
EM_API const char *em_version(void);
#ifdef __cplusplus
}
#endif
#endif
