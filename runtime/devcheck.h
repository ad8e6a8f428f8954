/* Checks of input values that run on the device and report without a copy
 * or a synchronisation (devcheck.c).
 *
 * An op whose input can be invalid in a way only its values show (a class
 * label outside [0, c), a probability outside [0, 1]) checks it with a
 * kernel. Reading the kernel's verdict back at once would cost a copy and a
 * synchronisation in every run. Instead each device has one status record
 * in mapped, pinned host memory: a check kernel that finds bad input writes
 * (tag, position, value) there unless an earlier check already did, and the
 * host reads it, a plain load from host memory, at the next point where it
 * synchronises with the device anyway (a copy to the host, em_stream_sync),
 * or at the start of the next run of an executor. The first failing check
 * in stream order wins; later ones leave the record alone.
 *
 * The kernel side (layout of the record, written by thread 0 of a one-block
 * check kernel): int64 w[4] = {tag, position, integer value, double value
 * (its bits)}; w[0] == 0 means nothing found. A kernel given `fresh` writes
 * w[0..3] whatever it finds (0 for nothing): the copy-back fallback uses
 * that with a scratch buffer. */
#ifndef EMBER_RUNTIME_DEVCHECK_H
#define EMBER_RUNTIME_DEVCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "ember/device.h"
#include "ember/status.h"

#define EM_DEVCHECK_WORDS 4     /* int64 words of the record */
#define EM_DEVCHECK_PAYLOAD 384 /* bytes of context a check keeps for its message */

/* What a failing check kernel wrote. */
typedef struct em_devcheck_found {
  int64_t position; /* flat element index of the bad value */
  int64_t ivalue;   /* the value, when an integer */
  double fvalue;    /* the value, when a float */
} em_devcheck_found;

/* Builds the error for a check that failed from the payload its op gave at
 * em_devcheck_arm (a copy, suitably aligned) and what the kernel found:
 * the same message the op gives when it checks synchronously. */
typedef em_status (*em_devcheck_report)(const void *payload, const em_devcheck_found *found);

/* Arms a check on dev (a CUDA device): *record is the device address of the
 * device's status record and *tag the non-zero value the kernel writes into
 * w[0] when it finds bad input; the payload (at most EM_DEVCHECK_PAYLOAD
 * bytes) is kept for the message. *record is NULL when the device has no
 * mapped host memory (no canMapHostMemory, a driver without the entry
 * points, or an allocation that failed: logged once on EMBER_LOG=memory):
 * the caller then checks synchronously. */
em_status em_devcheck_arm(em_device dev, em_devcheck_report report, const void *payload, size_t size, void **record,
                          int64_t *tag);

/* After a synchronisation with dev (every earlier kernel has finished):
 * the error of the first check that failed since the last collection (its
 * record cleared, so it is reported once), else EM_OK. Cheap: a load from
 * host memory. */
em_status em_devcheck_collect(em_device dev);

/* Between em_devcheck_hold_begin and _end (nested; this thread only) a
 * collection reports nothing and leaves the record for the next one: for a
 * caller that synchronises for reasons of its own and cannot report
 * (em_exec_free bringing parameters back to the host), so the failure goes
 * to the caller's next read of a value instead of being lost. */
void em_devcheck_hold_begin(void);
void em_devcheck_hold_end(void);

/* Before an executor's run on dev: when a check has already written its
 * record (read without synchronising, so possibly not yet), synchronises
 * and reports it, so a run never starts on top of an unreported failure.
 * EM_OK (and no synchronisation) in the ordinary case. */
em_status em_devcheck_settle(em_device dev);

/* em_shutdown, with the runtime locked and before the contexts go: frees
 * every record. */
struct em_runtime;
void em_devcheck_shutdown(struct em_runtime *rt);

#endif
