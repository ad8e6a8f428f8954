/* Resident copies (engine-internal; engine/tensor.c).
 *
 * The value of a parameter, state or constant is a host tensor owned by the
 * graph. An executor on a CUDA device keeps a copy of it there, uploaded once
 * and again only after the value changed. Versions live with the host
 * tensor's storage (shared by EM_CLONE_SHARE clones and by every view), one
 * per change wherever it happens:
 *   - a write on the host (em_parameter_set, a CPU op updating a state, the
 *     caller writing through em_parameter_value) makes the host copy the
 *     newest: device copies are uploaded again before their next use;
 *   - a write on a device (an op updating a state in place there,
 *     em_parameter_set with a tensor on that device) makes that device copy
 *     the newest: the host is brought up to date lazily, when someone reads
 *     it (em_parameter_value, em_tensor_to_host, em_graph_save, a CPU
 *     executor), never at the end of a run.
 * One lock guards every storage's copies and versions; copies are few (one
 * per parameter per device) and taken once per run. */
#ifndef EMBER_ENGINE_TENSOR_INTERNAL_H
#define EMBER_ENGINE_TENSOR_INTERNAL_H

#include "ember.h"

/* Registers a user (an executor) of host's copy on dev, creating the copy
 * (not yet uploaded) on first use. Device memory is held until the last user
 * lets go (em_resident_drop). */
em_status em_resident_hold(const em_tensor *host, em_device dev);
/* host's copy on dev, up to date (uploaded when the host, or another
 * device's copy, is newer), as a new tensor (release it) with host's dtype,
 * shape and strides. dev must be held. */
em_status em_resident_get(const em_tensor *host, em_device dev, em_tensor **out);
/* The copy on dev was written in place: it is now the newest value. */
void em_resident_written(const em_tensor *host, em_device dev);
/* Lets go of a hold. The last user's drop brings the host up to date when the
 * copy is the newest, then frees the copy; when that copy back fails, the
 * copy is kept (nothing is lost) and the error returned. */
em_status em_resident_drop(const em_tensor *host, em_device dev);
/* Writes value into host's copy on value's device when one exists there
 * (a device-to-device copy; value must match host's dtype and shape and be
 * contiguous): *done = 1. Else *done = 0 and nothing happens. */
em_status em_resident_set(const em_tensor *host, const em_tensor *value, int *done);

/* A new tensor on dev holding host's newest value: copied device to device
 * when dev's copy is the newest, else through the host (brought up to date). */
em_status em_resident_read(const em_tensor *host, em_device dev, em_tensor **out);

/* Brings host's bytes up to date when a device copy is newer. */
em_status em_tensor_sync_host(const em_tensor *host);
/* host's bytes were written (or handed to someone who may write them): every
 * device copy is stale. Call em_tensor_sync_host first unless the whole value
 * is overwritten. */
void em_tensor_host_written(const em_tensor *host);

/* Derived forms of a graph value: copies in another layout that an op makes
 * from the host bytes and wants to keep between runs (the fast CPU
 * convolution's weights in oneDNN's blocked layout, ops/dnnl.c). Kept with
 * the storage, dropped when the value changes (a new version) and when the
 * storage is freed. Only through a tensor marked versioned: a graph's own
 * tensor of a parameter, state or constant, every change of which makes a
 * new version (em_parameter_set, a learner's update, ...). A fed input, an
 * intermediate, a view made by an op, or the caller's tensor behind
 * em_constant (which gets a view of its own) can change without one, so they
 * are never marked. */
typedef struct em_derived em_derived;
/* Makes the form: *data and the function that frees it (may be NULL). */
typedef em_status (*em_derive_fn)(void *ctx, void **data, void (**free_fn)(void *data));

/* t is a graph value's own tensor (the CPU executor's bind_leaves). */
void em_tensor_mark_versioned(em_tensor *t);
/* The graph holding t lets go of it (em_graph_free): t is no longer versioned
 * and every form kept with its storage is dropped, as the bytes may change
 * without a new version from then on (a new graph marks its tensor again). */
void em_tensor_unmark_versioned(em_tensor *t);
/* The form of t's current value that key names (bytes: the layout, t's
 * offset, shape and strides, whatever decides the result), made by make(ctx)
 * on a miss, retained in *out (em_derived_release). *out is NULL when t is
 * not versioned, or its host bytes are not the newest: the caller makes a
 * transient form itself. A form made while the value changed is returned but
 * not kept. */
em_status em_tensor_derived(const em_tensor *t, const void *key, size_t key_len, em_derive_fn make, void *ctx,
                            em_derived **out);
void *em_derived_data(const em_derived *d);
void em_derived_release(em_derived *d);

#endif
