/* neuron-emu's libnrt: per-model profiling, after the documented signatures of AWS's
 * nrt_profile.h. A profile started on a model records each of its executions until
 * nrt_profile_stop writes the file (the JSON profile report of `neuron-emu run --profile-json`,
 * which also opens in Perfetto: docs/profiling.md). */
#ifndef NRT_PROFILE_H
#define NRT_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

NRT_STATUS nrt_profile_start(nrt_model_t *model, const char *filename);
NRT_STATUS nrt_profile_stop(const char *filename);

#ifdef __cplusplus
}
#endif
#endif /* NRT_PROFILE_H */
