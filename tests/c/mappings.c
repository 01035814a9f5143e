/* mappings: device memory used as a hostile but legal program may, through plain syscalls
 * under LD_PRELOAD=libneuron_emu_preload.so: a chunk and the semaphore page mapped twice and
 * unmapped twice, a partial munmap, mprotect of a mapping, and every store to the increment
 * register counted (plain stores, lock add, from several threads). Layouts restate
 * shared/reference/driver-abi.md §2.3/§2.5 (LP64), as in abi_smoke.c. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define MEM_ALLOC_V2MT 0x80304e66u
#define MEM_GET_EXTENDED_INFO 0x80084e1du
#define MEM_BUF_COPY64 0xc0284e18u
#define SEMAPHORE_READ 0xc0084e2bu
#define RESOURCE_MMAP_INFO 0xc0204e70u

struct mem_alloc_v2mt { uint64_t size, align; uint32_t host_memory, dram_channel, dram_region, nc_id, mem_type, pad; uint64_t mem_handle_ptr; };
struct ext_info { uint64_t mem_handle; uint32_t version, host_memory; uint64_t mmap_offset, pa, pid, size; };
struct buf_copy64 { uint64_t mem_handle, buffer, size, offset; uint32_t copy_to_mem_handle, pad; };
struct semaphore { uint32_t nc_id, semaphore_index, value; };
struct resource_info { uint32_t block, block_id, resource, pad; uint64_t offset, size; };

static int failures = 0;
#define EXPECT(cond, ...)                                          \
    do {                                                           \
        if (!(cond)) {                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                          \
            fprintf(stderr, "\n");                                 \
            failures++;                                            \
        }                                                          \
    } while (0)

static int fd;

static uint64_t chunk(uint64_t size, uint64_t *off) {
    uint64_t h = 0;
    struct mem_alloc_v2mt a = { .size = size, .host_memory = 1, .mem_type = 2, .mem_handle_ptr = (uint64_t)(uintptr_t)&h };
    EXPECT(ioctl(fd, MEM_ALLOC_V2MT, &a) == 0, "alloc");
    struct ext_info xi = { .mem_handle = h };
    EXPECT(ioctl(fd, MEM_GET_EXTENDED_INFO, &xi) == 0, "extended info");
    *off = xi.mmap_offset;
    return h;
}

static void copy(uint64_t h, uint64_t off, void *buf, uint64_t n, int to_dev) {
    struct buf_copy64 c = { .mem_handle = h, .buffer = (uint64_t)(uintptr_t)buf, .size = n, .offset = off, .copy_to_mem_handle = (uint32_t)to_dev };
    EXPECT(ioctl(fd, MEM_BUF_COPY64, &c) == 0, "buf copy");
}

static uint32_t sem_read(uint32_t idx) {
    struct semaphore s = { .nc_id = 0, .semaphore_index = idx };
    EXPECT(ioctl(fd, SEMAPHORE_READ, &s) == 0, "sem read");
    return s.value;
}

static volatile uint32_t *regs;

static void *incs(void *arg) {
    (void)arg;
    for (int i = 0; i < 50000; i++) regs[(0x1800 + 4 * 12) / 4] = 1;
    return NULL;
}

int main(void) {
    fd = open("/dev/neuron0", O_RDWR);
    if (fd < 0) { perror("open /dev/neuron0"); return 1; }

    /* Twice mapped, twice unmapped; the device's memory survives. */
    uint64_t off, h = chunk(3 * 4096, &off);
    uint32_t *a = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
    uint32_t *b = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
    EXPECT(a != MAP_FAILED && b != MAP_FAILED && a != b, "two mappings");
    a[3] = 0xabcd;
    EXPECT(b[3] == 0xabcd, "one memory");
    EXPECT(munmap(a, 3 * 4096) == 0, "munmap 1");
    /* Partial munmap of the second: the middle page. */
    EXPECT(munmap((char *)b + 4096, 4096) == 0, "partial munmap: errno %d", errno);
    b[5] = 0x77;
    ((uint32_t *)((char *)b + 8192))[1] = 0x88;
    uint32_t back[2] = {0};
    copy(h, 20, &back[0], 4, 0);
    copy(h, 8192 + 4, &back[1], 4, 0);
    EXPECT(back[0] == 0x77 && back[1] == 0x88, "rest still mapped: %x %x", back[0], back[1]);
    /* mprotect of what is left: the device keeps writing, the program keeps reading. */
    EXPECT(mprotect(b, 4096, PROT_READ) == 0, "mprotect");
    uint32_t v = 0x4242;
    copy(h, 8, &v, 4, 1);
    EXPECT(b[2] == 0x4242, "device write seen through a read-only view");
    EXPECT(munmap(b, 4096) == 0 && munmap((char *)b + 8192, 4096) == 0, "unmap the rest");
    char buf[64];
    memset(buf, 9, sizeof buf);
    copy(h, 0, buf, sizeof buf, 1);
    memset(buf, 0, sizeof buf);
    copy(h, 0, buf, sizeof buf, 0);
    EXPECT(buf[0] == 9 && buf[63] == 9, "device memory intact");

    /* The semaphore page: twice mapped and unmapped, then every store counted. */
    struct resource_info ri = { .block = 0, .block_id = 0, .resource = 0 };
    EXPECT(ioctl(fd, RESOURCE_MMAP_INFO, &ri) == 0, "resource info");
    void *p1 = mmap(NULL, 0x2000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)ri.offset);
    void *p2 = mmap(NULL, 0x2000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)ri.offset);
    EXPECT(p1 != MAP_FAILED && p2 != MAP_FAILED && p1 != p2, "two page mappings");
    EXPECT(munmap(p1, 0x2000) == 0 && munmap(p2, 0x2000) == 0, "unmap both");
    regs = mmap(NULL, 0x2000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)ri.offset);
    EXPECT(regs != MAP_FAILED, "map page");
    for (int i = 0; i < 3; i++) regs[(0x1800 + 4 * 11) / 4] = 1;
    EXPECT(sem_read(11) == 3, "three stores of 1: %u", sem_read(11));
    __atomic_fetch_add(&regs[(0x1800 + 4 * 11) / 4], 2, __ATOMIC_SEQ_CST);
    EXPECT(sem_read(11) == 5, "lock add of 2: %u", sem_read(11));
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, incs, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    EXPECT(sem_read(12) == 200000, "4 threads x 50000: %u", sem_read(12));
    EXPECT(regs[(0x1000 + 4 * 12) / 4] == 200000, "value read through the view");
    munmap((void *)regs, 0x2000);

    close(fd);
    if (failures) return 1;
    printf("all checks passed\n");
    return 0;
}
