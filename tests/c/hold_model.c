/* hold_model: a long-lived libnrt application, for tests that look at it from another process.
 * Written for the public nrt.h API only.
 *
 *   cc hold_model.c -o hold_model -I<include dir> -L<lib dir> -lnrt
 *   ./hold_model model.neff N
 * Loads the model on the first free core, runs it N times on zero inputs, prints
 * "ready <pid> <executions>" and then holds everything (cores, model, tensors) until its
 * standard input reaches end of file; then it cleans up in the documented order. A failing
 * call prints "<call> failed: <status string> (<code>)" on stderr and exits with 1. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"

#define CHECK(call)                                                                      \
    do {                                                                                 \
        NRT_STATUS s_ = (call);                                                          \
        if (s_ != NRT_SUCCESS) {                                                         \
            fprintf(stderr, "%s failed: %s (%d)\n", #call, nrt_get_status_as_str(s_), s_); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s model.neff executions\n", argv[0]);
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror(argv[1]);
        return 2;
    }
    size_t neff_size = (size_t)st.st_size;
    void *neff = mmap(NULL, neff_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (neff == MAP_FAILED) {
        perror(argv[1]);
        return 2;
    }
    long runs = strtol(argv[2], NULL, 10);

    CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""));
    nrt_model_t *model = NULL;
    CHECK(nrt_load(neff, neff_size, -1, -1, &model));
    nrt_tensor_info_array_t *info = NULL;
    CHECK(nrt_get_model_tensor_info(model, &info));
    nrt_tensor_set_t *inputs = NULL, *outputs = NULL;
    CHECK(nrt_allocate_tensor_set(&inputs));
    CHECK(nrt_allocate_tensor_set(&outputs));
    nrt_tensor_t **tensors = calloc(info->tensor_count, sizeof(nrt_tensor_t *));
    for (uint64_t i = 0; i < info->tensor_count; i++) {
        nrt_tensor_info_t *ti = &info->tensor_array[i];
        CHECK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, ti->size, ti->name, &tensors[i]));
        if (ti->usage == NRT_TENSOR_USAGE_INPUT) {
            CHECK(nrt_tensor_memset(tensors[i], 0, 0, ti->size));
            CHECK(nrt_add_tensor_to_tensor_set(inputs, ti->name, tensors[i]));
        } else {
            CHECK(nrt_add_tensor_to_tensor_set(outputs, ti->name, tensors[i]));
        }
    }
    for (long r = 0; r < runs; r++) CHECK(nrt_execute(model, inputs, outputs));
    printf("ready %d %ld\n", (int)getpid(), runs);
    fflush(stdout);

    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }

    CHECK(nrt_unload(model));
    for (uint64_t i = 0; i < info->tensor_count; i++) nrt_tensor_free(&tensors[i]);
    free(tensors);
    nrt_destroy_tensor_set(&inputs);
    nrt_destroy_tensor_set(&outputs);
    CHECK(nrt_free_model_tensor_info(info));
    nrt_close();
    munmap(neff, neff_size);
    return 0;
}
