/* neuron-emu's libnrt: the asynchronous (nrta_*) API, after the documented signatures of
 * AWS's nrt_async.h and the calls its clients make. Each (logical core, execution unit, queue)
 * has a submission queue serviced by its own worker thread; a request's status is stored
 * through `ret` and registered eventfds are signalled when it completes. At most
 * NRTA_MAX_INFLIGHT requests may be pending on one queue (NRT_QUEUE_FULL beyond). */
#ifndef NRT_ASYNC_H
#define NRT_ASYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    NRTA_XU_TENSOR_OP = 0,
    NRTA_XU_COMPUTE,
    NRTA_XU_COLLECTIVES,
    NRTA_XU_TYPE_NUM
} nrta_xu_t;

/* Upper 16 bits: the execution unit's id; lower 48 bits: the sequence number (from 1). */
typedef uint64_t nrta_seq_t;
typedef uint16_t nrta_xu_id_t;

#define NRTA_SEQ_NUM_MAX ((1ull << 48) - 1)
#define NRTA_SEQ_NUM_MASK NRTA_SEQ_NUM_MAX
#define NRTA_SEQ_GET_SEQ_NUM(seq_id) ((seq_id) & NRTA_SEQ_NUM_MASK)
#define NRTA_SEQ_GET_XU_ID(seq_id) ((seq_id) >> 48)

/* Pending requests one queue holds (this runtime's bound, as AWS documents 63). */
#define NRTA_MAX_INFLIGHT 63

NRT_STATUS nrta_tensor_write(nrt_tensor_t *tensor, const void *buf, uint64_t offset, uint64_t size,
                             int lnc, int queue, NRT_STATUS *ret, nrta_seq_t *req_sequence);
NRT_STATUS nrta_tensor_read(void *buf, nrt_tensor_t *tensor, uint64_t offset, uint64_t size,
                            int lnc, int queue, NRT_STATUS *ret, nrta_seq_t *req_sequence);
NRT_STATUS nrta_execute_schedule(nrt_model_t *model, const nrt_tensor_set_t *input, nrt_tensor_set_t *output,
                                 int queue, NRT_STATUS *ret, nrta_seq_t *req_sequence);

NRT_STATUS nrta_is_completed(nrta_seq_t seq, bool *is_completed);
NRT_STATUS nrta_get_sequence(uint32_t lnc, nrta_xu_t xu, int queue, nrta_seq_t *seq);
/* fd >= 0: signalled (eventfd write of 1) after each completion on (lnc, xu, queue);
 * fd < 0: unregister. */
NRT_STATUS nrta_event_register_xu_completion(int lnc, nrta_xu_t xu, int queue, int fd);

#ifdef __cplusplus
}
#endif
#endif /* NRT_ASYNC_H */
