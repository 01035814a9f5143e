/* neuron-emu's libnrt: experimental API (tensor info, model info, pool-engine microcode), from the documented
 * signatures of AWS's nrt_experimental.h. */
#ifndef NRT_EXPERIMENTAL_H
#define NRT_EXPERIMENTAL_H

#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NRT_TENSOR_NAME_MAX 256

typedef enum nrt_tensor_usage {
    NRT_TENSOR_USAGE_INPUT = 0,
    NRT_TENSOR_USAGE_OUTPUT = 1,
} nrt_tensor_usage_t;

/* Hardware dtype codes (nrt.h). */
typedef enum nrt_dtype {
    NRT_DTYPE_UNKNOWN = 0x0,
    NRT_DTYPE_INVALID = 0x0,
    NRT_DTYPE_UINT64 = 0x1,
    NRT_DTYPE_INT8 = 0x2,
    NRT_DTYPE_UINT8 = 0x3,
    NRT_DTYPE_INT16 = 0x4,
    NRT_DTYPE_UINT16 = 0x5,
    NRT_DTYPE_BFLOAT16 = 0x6,
    NRT_DTYPE_FLOAT16 = 0x7,
    NRT_DTYPE_INT32 = 0x8,
    NRT_DTYPE_UINT32 = 0x9,
    NRT_DTYPE_FLOAT32 = 0xA,
    NRT_DTYPE_FP32R = 0xB,
    NRT_DTYPE_INT64 = 0xC,
    NRT_DTYPE_FP8_E3 = 0xD,
    NRT_DTYPE_FP8_E4 = 0xE,
    NRT_DTYPE_FP8_E5 = 0xF,
} nrt_dtype_t;

typedef struct nrt_tensor_info {
    char name[NRT_TENSOR_NAME_MAX];
    nrt_tensor_usage_t usage;
    size_t size;
    nrt_dtype_t dtype;
    uint32_t *shape;
    uint32_t ndim;
} nrt_tensor_info_t;

typedef struct nrt_tensor_info_array {
    uint64_t tensor_count;
    nrt_tensor_info_t tensor_array[];
} nrt_tensor_info_array_t;

typedef struct nrt_model_info {
    uint32_t vnc;
} nrt_model_info_t;

/* Allocated by the runtime; free only with nrt_free_model_tensor_info. */
NRT_STATUS nrt_get_model_tensor_info(nrt_model_t *model, nrt_tensor_info_array_t **tensor_info);
NRT_STATUS nrt_free_model_tensor_info(nrt_tensor_info_array_t *tensor_info);
/* Copy `size` bytes from host memory to `dest`, an address inside a mapped DEVICE tensor
 * (nrt_tensor_get_va with NEURON_RT_MAP_HBM=1). */
NRT_STATUS nrt_memcpy_to_device(void *dest, const void *src, size_t size);
/* Always 1: one execution at a time per model. */
NRT_STATUS nrt_get_model_instance_count(nrt_model_t *model, uint32_t *instance_count);
/* Block until every request queued through nrt_async.h on logical core `vnc` completed. */
NRT_STATUS nrt_async_drain_queued_execs(int32_t vnc);
NRT_STATUS nrt_get_model_info(const nrt_model_t *model, nrt_model_info_t *info, size_t info_size_in, size_t *info_size_out);

/* GpSimd (pool engine) microcode: raw IRAM and DRAM images. */
typedef struct nrt_ucode_img {
    uint8_t *bin;
    size_t size;
} nrt_ucode_img;

typedef struct nrt_ucode_info {
    nrt_ucode_img iram;
    nrt_ucode_img dram;
} nrt_ucode_info;

/* Override the GpSimd microcode; must be called before nrt_init (after it: NRT_INVALID).
 * The images are copied. */
NRT_STATUS nrt_set_pool_eng_ucode(const nrt_ucode_info *ucode_info);

#ifdef __cplusplus
}
#endif
#endif /* NRT_EXPERIMENTAL_H */
