/* abi_smoke: exercise the neuron.ko user-space ABI directly with open/ioctl/mmap on
 * /dev/neuron0 — no runtime, no emulator API. Built by the test with the system cc and run
 * under LD_PRELOAD=libneuron_emu_preload.so (or against a real device).
 *
 * Argument layouts and command values restate shared/reference/driver-abi.md §2.3/§2.5
 * (LP64); they are written here independently of the Rust abi crate on purpose. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define DEVICE_BASIC_INFO 0x40084e64u
#define MEM_ALLOC_V2MT 0x80304e66u
#define MEM_GET_EXTENDED_INFO 0x80084e1du
#define MEM_BUF_COPY64 0xc0284e18u
#define MEM_FREE 0x80084e16u
#define SEMAPHORE_INCREMENT 0x80084e29u
#define SEMAPHORE_READ 0xc0084e2bu
#define SEMAPHORE_WRITE 0x80084e2cu
#define RESOURCE_MMAP_INFO 0xc0204e70u
#define DMA_QUEUE_INIT 0x80084e21u

struct basic_info { uint32_t architecture, revision; };
struct mem_alloc_v2mt { uint64_t size, align; uint32_t host_memory, dram_channel, dram_region, nc_id, mem_type, pad; uint64_t mem_handle_ptr; };
struct ext_info { uint64_t mem_handle; uint32_t version, host_memory; uint64_t mmap_offset, pa, pid, size; };
struct buf_copy64 { uint64_t mem_handle, buffer, size, offset; uint32_t copy_to_mem_handle, pad; };
struct mem_free { uint64_t mem_handle; };
struct semaphore { uint32_t nc_id, semaphore_index, value; };
struct resource_info { uint32_t block, block_id, resource, pad; uint64_t offset, size; };
struct queue_init { uint32_t eng_id, qid, tx_desc_count, rx_desc_count; uint64_t tx_handle, rx_handle, rxc_handle; uint32_t axi_port, pad; };

_Static_assert(sizeof(struct mem_alloc_v2mt) == 48, "mem_alloc_v2mt");
_Static_assert(sizeof(struct ext_info) == 48, "ext_info");
_Static_assert(sizeof(struct buf_copy64) == 40, "buf_copy64");
_Static_assert(sizeof(struct resource_info) == 32, "resource_info");
_Static_assert(sizeof(struct queue_init) == 48, "queue_init");

static int failures = 0;
#define EXPECT(cond, ...)                              \
    do {                                               \
        if (!(cond)) {                                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);              \
            fprintf(stderr, "\n");                     \
            failures++;                                \
        }                                              \
    } while (0)
#define EXPECT_ERRNO(call, want) \
    do { errno = 0; int r_ = (call); EXPECT(r_ == -1 && errno == (want), "%s: got %d errno %d, want errno %d", #call, r_, errno, want); } while (0)

int main(void) {
    int fd = open("/dev/neuron0", O_RDWR);
    if (fd < 0) { perror("open /dev/neuron0"); return 1; }

    struct basic_info bi = {0};
    EXPECT(ioctl(fd, DEVICE_BASIC_INFO, &bi) == 0, "basic info");
    EXPECT(bi.architecture == 3, "architecture %u", bi.architecture);

    /* A host chunk: allocate, map, write through the mapping, read back via MEM_BUF_COPY64. */
    uint64_t h = 0;
    struct mem_alloc_v2mt a = { .size = 8192, .host_memory = 1, .mem_type = 2, .mem_handle_ptr = (uint64_t)(uintptr_t)&h };
    EXPECT(ioctl(fd, MEM_ALLOC_V2MT, &a) == 0 && h != 0, "alloc");
    struct ext_info xi = { .mem_handle = h };
    EXPECT(ioctl(fd, MEM_GET_EXTENDED_INFO, &xi) == 0, "extended info");
    EXPECT(xi.size == 8192 && xi.host_memory == 1, "size %llu host %u", (unsigned long long)xi.size, xi.host_memory);
    uint32_t *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)xi.mmap_offset);
    EXPECT(p != MAP_FAILED, "mmap chunk: errno %d", errno);
    if (p != MAP_FAILED) {
        p[10] = 0x12345678u;
        uint32_t back = 0;
        struct buf_copy64 c = { .mem_handle = h, .buffer = (uint64_t)(uintptr_t)&back, .size = 4, .offset = 40 };
        EXPECT(ioctl(fd, MEM_BUF_COPY64, &c) == 0 && back == 0x12345678u, "read back 0x%x", back);
        EXPECT(munmap(p, 8192) == 0, "munmap");
    }
    errno = 0;
    EXPECT(mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, (off_t)xi.mmap_offset) == MAP_FAILED && errno == EINVAL, "partial map refused");

    /* Semaphores through ioctls and through the mapped register page. */
    struct semaphore s = { .nc_id = 0, .semaphore_index = 5, .value = 7 };
    EXPECT(ioctl(fd, SEMAPHORE_WRITE, &s) == 0, "sem write");
    s.value = 3;
    EXPECT(ioctl(fd, SEMAPHORE_INCREMENT, &s) == 0, "sem inc");
    s.value = 0;
    EXPECT(ioctl(fd, SEMAPHORE_READ, &s) == 0 && s.value == 10, "sem read %u", s.value);
    struct resource_info ri = { .block = 0, .block_id = 0, .resource = 0 };
    EXPECT(ioctl(fd, RESOURCE_MMAP_INFO, &ri) == 0 && ri.size == 0x2000, "resource info");
    volatile uint32_t *page = mmap(NULL, 0x2000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)ri.offset);
    EXPECT(page != MAP_FAILED, "map semaphore page");
    if (page != MAP_FAILED) {
        EXPECT(page[(0x1000 + 4 * 5) / 4] == 10, "value register %u", page[(0x1000 + 4 * 5) / 4]);
        page[(0x1800 + 4 * 5) / 4] = 5; /* increment register */
        /* A store through the mapping takes effect on entry to the next ioctl, whatever it is
           (the emulator applies register mailboxes there, never on its own clock). */
        s.value = 0;
        EXPECT(ioctl(fd, SEMAPHORE_READ, &s) == 0, "sem read after store");
        EXPECT(s.value == 15, "store to the increment register seen by the next ioctl: value %u", s.value);
        munmap((void *)page, 0x2000);
    }

    /* Bad inputs. */
    EXPECT_ERRNO(ioctl(fd, 0x80084effu, &bi), EINVAL);            /* unknown command */
    EXPECT_ERRNO(ioctl(fd, MEM_ALLOC_V2MT, NULL), EFAULT);         /* null argument */
    struct ext_info bad = { .mem_handle = 0xdeadbeef };
    EXPECT_ERRNO(ioctl(fd, MEM_GET_EXTENDED_INFO, &bad), EINVAL); /* bad handle */
    struct semaphore sb = { .nc_id = 99, .semaphore_index = 0 };
    EXPECT_ERRNO(ioctl(fd, SEMAPHORE_READ, &sb), E2BIG);           /* nc out of range */
    struct queue_init qi = { .eng_id = 500, .qid = 0, .tx_desc_count = 32, .rx_desc_count = 32 };
    EXPECT_ERRNO(ioctl(fd, DMA_QUEUE_INIT, &qi), EINVAL);          /* engine out of range */
    qi.eng_id = 3; qi.qid = 16;
    EXPECT_ERRNO(ioctl(fd, DMA_QUEUE_INIT, &qi), EINVAL);          /* queue out of range */

    struct mem_free f = { .mem_handle = h };
    EXPECT(ioctl(fd, MEM_FREE, &f) == 0, "free");
    EXPECT_ERRNO(ioctl(fd, MEM_FREE, &f), EINVAL);                 /* double free */
    EXPECT(close(fd) == 0, "close");
    if (failures) { fprintf(stderr, "%d failures\n", failures); return 1; }
    printf("abi_smoke: all checks passed\n");
    return 0;
}
