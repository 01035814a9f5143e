/* run_neff: load a NEFF, run it once, write every output to <name>.out.
 * In the style of the Neuron SDK's "first application" (nrt-developer-guide): written for the
 * public nrt.h API only, so it builds unchanged against AWS's libnrt or neuron-emu's.
 *
 *   cc run_neff.c -o run_neff -I<include dir> -L<lib dir> -lnrt
 *   ./run_neff model.neff [input_name input.bin]...
 * Inputs not named on the command line are zero-filled; an input file must have exactly the
 * tensor's size. */
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

static void *map_file(const char *path, size_t *size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        perror(path);
        exit(2);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        perror(path);
        exit(2);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        perror(path);
        exit(2);
    }
    *size = (size_t)st.st_size;
    return p;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc % 2 != 0) {
        fprintf(stderr, "usage: %s model.neff [input_name input.bin]...\n", argv[0]);
        return 2;
    }
    size_t neff_size = 0;
    void *neff = map_file(argv[1], &neff_size);

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
            const char *file = NULL;
            for (int a = 2; a + 1 < argc; a += 2)
                if (strcmp(argv[a], ti->name) == 0) file = argv[a + 1];
            if (file) {
                size_t n = 0;
                void *data = map_file(file, &n);
                if (n != ti->size) {
                    fprintf(stderr, "input %s: file %s has %zu bytes, tensor has %zu\n", ti->name, file, n, ti->size);
                    return 2;
                }
                CHECK(nrt_tensor_write(tensors[i], data, 0, n));
                munmap(data, n);
            } else {
                CHECK(nrt_tensor_memset(tensors[i], 0, 0, ti->size));
            }
            CHECK(nrt_add_tensor_to_tensor_set(inputs, ti->name, tensors[i]));
        } else {
            CHECK(nrt_add_tensor_to_tensor_set(outputs, ti->name, tensors[i]));
        }
        printf("%s %s size %zu dtype 0x%x ndim %u\n", ti->usage == NRT_TENSOR_USAGE_INPUT ? "input" : "output",
               ti->name, ti->size, (unsigned)ti->dtype, ti->ndim);
    }

    CHECK(nrt_execute(model, inputs, outputs));

    for (uint64_t i = 0; i < info->tensor_count; i++) {
        nrt_tensor_info_t *ti = &info->tensor_array[i];
        if (ti->usage != NRT_TENSOR_USAGE_OUTPUT) continue;
        void *buf = malloc(ti->size);
        CHECK(nrt_tensor_read(tensors[i], buf, 0, ti->size));
        char path[NRT_TENSOR_NAME_MAX + 8];
        snprintf(path, sizeof path, "%s.out", ti->name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, ti->size, f) != ti->size) {
            perror(path);
            return 1;
        }
        fclose(f);
        free(buf);
        printf("wrote %s\n", path);
    }

    /* Clean up in the documented order. */
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
