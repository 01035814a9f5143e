/* neuron-emu's libnrt: version query (layout as documented for AWS's nrt_version.h). */
#ifndef NRT_VERSION_H
#define NRT_VERSION_H

#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nrt_version {
    uint64_t rt_major;
    uint64_t rt_minor;
    uint64_t rt_patch;
    uint64_t rt_maintenance;
    char rt_detail[128];
    char git_hash[64];
} nrt_version_t;

/* Callable before nrt_init. `size` should be sizeof(nrt_version_t). */
NRT_STATUS nrt_get_version(nrt_version_t *ver, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* NRT_VERSION_H */
