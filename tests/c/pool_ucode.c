/* pool_ucode: override the GpSimd microcode with nrt_set_pool_eng_ucode before nrt_init, then
 * load a NEFF, run it once with zero inputs, and print each status:
 *   ./pool_ucode iram.bin dram.bin model.neff
 * prints "set <status>", "set-after-init <status>", "exec <status>". Written for the public
 * nrt.h / nrt_experimental.h API only. */
#include <stdio.h>
#include <stdlib.h>

#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"

static uint8_t *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (!p || (n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n)) {
        perror(path);
        exit(2);
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

#define MUST(call)                                                              \
    do {                                                                        \
        NRT_STATUS s_ = (call);                                                 \
        if (s_ != NRT_SUCCESS) {                                                \
            fprintf(stderr, "%s failed: %s (%d)\n", #call, nrt_get_status_as_str(s_), s_); \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s iram.bin dram.bin model.neff\n", argv[0]);
        return 2;
    }
    nrt_ucode_info info;
    info.iram.bin = slurp(argv[1], &info.iram.size);
    info.dram.bin = slurp(argv[2], &info.dram.size);
    printf("set %d\n", (int)nrt_set_pool_eng_ucode(&info));
    /* The images were copied: the caller may free them at once. */
    free(info.iram.bin);
    free(info.dram.bin);
    info.iram.bin = NULL;
    info.iram.size = 0;
    info.dram.bin = NULL;
    info.dram.size = 0;

    size_t neff_size = 0;
    uint8_t *neff = slurp(argv[3], &neff_size);
    MUST(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""));
    uint8_t one = 1;
    nrt_ucode_img img = {&one, 1};
    nrt_ucode_info late = {img, img};
    printf("set-after-init %d\n", (int)nrt_set_pool_eng_ucode(&late));

    nrt_model_t *model = NULL;
    MUST(nrt_load(neff, neff_size, -1, -1, &model));
    nrt_tensor_info_array_t *ti = NULL;
    MUST(nrt_get_model_tensor_info(model, &ti));
    nrt_tensor_set_t *inputs = NULL, *outputs = NULL;
    MUST(nrt_allocate_tensor_set(&inputs));
    MUST(nrt_allocate_tensor_set(&outputs));
    nrt_tensor_t **t = calloc(ti->tensor_count, sizeof(nrt_tensor_t *));
    for (uint64_t i = 0; i < ti->tensor_count; i++) {
        nrt_tensor_info_t *x = &ti->tensor_array[i];
        MUST(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, x->size, x->name, &t[i]));
        MUST(nrt_tensor_memset(t[i], 0, 0, x->size));
        if (x->usage == NRT_TENSOR_USAGE_INPUT)
            MUST(nrt_add_tensor_to_tensor_set(inputs, x->name, t[i]));
        else
            MUST(nrt_add_tensor_to_tensor_set(outputs, x->name, t[i]));
    }
    printf("exec %d\n", (int)nrt_execute(model, inputs, outputs));
    fflush(stdout);

    nrt_unload(model);
    for (uint64_t i = 0; i < ti->tensor_count; i++) nrt_tensor_free(&t[i]);
    free(t);
    nrt_destroy_tensor_set(&inputs);
    nrt_destroy_tensor_set(&outputs);
    MUST(nrt_free_model_tensor_info(ti));
    nrt_close();
    free(neff);
    return 0;
}
