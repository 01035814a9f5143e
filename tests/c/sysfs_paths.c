/* Reads the sysfs paths lablup/all-smi reads (users-faults-and-tools.md §3.4) and lists
 * /sys/class/neuron_device, with plain libc calls, under the preload shim on an emulated
 * trn2.48xlarge. Prints "all checks passed" on success. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;

#define CHECK(c, ...)                                                                    \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                  \
            printf(__VA_ARGS__);                                                         \
            printf("\n");                                                                \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

/* The whole attribute through stdio. */
static int fread_attr(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = 0;
    fclose(f);
    return (int)n;
}

/* The whole attribute through open/read. */
static int read_attr(const char *path, char *buf, size_t len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = 0;
    return (int)n;
}

int main(void) {
    const char *d = "/sys/devices/virtual/neuron_device";
    char p[512], b[4096];
    for (int n = 0; n < 16; n++) {
        snprintf(p, sizeof p, "%s/neuron%d/info/serial_number", d, n);
        CHECK(fread_attr(p, b, sizeof b) == 17 && b[16] == '\n', "%s: %s", p, b);
        snprintf(p, sizeof p, "%s/neuron%d/info/architecture/arch_type", d, n);
        CHECK(fread_attr(p, b, sizeof b) > 0 && strcmp(b, "NDv3\n") == 0, "%s: %s", p, b);
        snprintf(p, sizeof p, "%s/neuron%d/info/architecture/device_name", d, n);
        CHECK(read_attr(p, b, sizeof b) > 0 && strcmp(b, "Trainium2\n") == 0, "%s: %s", p, b);
        snprintf(p, sizeof p, "%s/neuron%d/info/architecture/instance_type", d, n);
        CHECK(read_attr(p, b, sizeof b) > 0 && strcmp(b, "Trn2\n") == 0, "%s: %s", p, b);
        snprintf(p, sizeof p, "%s/neuron%d/stats/power/utilization", d, n);
        CHECK(fread_attr(p, b, sizeof b) > 0 && strncmp(b, "POWER_STATUS_VALID,", 19) == 0,
              "%s: %s", p, b);
        for (int c = 0; c < 8; c++) {
            snprintf(p, sizeof p, "%s/neuron%d/neuron_core%d/stats/memory_usage/device_mem/present",
                     d, n, c);
            CHECK(fread_attr(p, b, sizeof b) > 0 && strcmp(b, "0\n") == 0, "%s: %s", p, b);
            snprintf(p, sizeof p, "%s/neuron%d/neuron_core%d/info/architecture/arch_type", d, n, c);
            CHECK(read_attr(p, b, sizeof b) > 0 && strcmp(b, "NCv3\n") == 0, "%s: %s", p, b);
        }
    }
    CHECK(fread_attr("/sys/module/neuron/version", b, sizeof b) > 0 && strcmp(b, "2.26.5.0\n") == 0,
          "version: %s", b);
    CHECK(read_attr("/sys/devices/virtual/dmi/id/product_name", b, sizeof b) > 0 &&
              strcmp(b, "trn2.48xlarge\n") == 0,
          "product_name: %s", b);
    CHECK(read_attr("/sys/class/neuron_device/neuron0/connected_devices", b, sizeof b) > 0 &&
              strcmp(b, "12, 1, 3, 4\n") == 0,
          "connected_devices: %s", b);
    /* An attribute is read-only and a missing one is ENOENT. */
    CHECK(open("/sys/class/neuron_device/neuron0/core_count", O_WRONLY) < 0, "write open");
    CHECK(open("/sys/class/neuron_device/neuron16/core_count", O_RDONLY) < 0, "no neuron16");
    CHECK(fopen("/sys/module/neuron/version", "w") == NULL, "fopen for writing");

    /* The class directory lists 16 links and the class attributes. */
    DIR *dir = opendir("/sys/class/neuron_device");
    CHECK(dir != NULL, "opendir class");
    int links = 0, attrs = 0;
    if (dir) {
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            if (strncmp(e->d_name, "neuron", 6) == 0)
                links++;
            else if (e->d_name[0] != '.')
                attrs++;
        }
        closedir(dir);
    }
    CHECK(links == 16 && attrs == 5, "links %d attrs %d", links, attrs);
    ssize_t n = readlink("/sys/class/neuron_device/neuron7", b, sizeof b - 1);
    CHECK(n > 0, "readlink");
    if (n > 0) {
        b[n] = 0;
        CHECK(strcmp(b, "../../devices/virtual/neuron_device/neuron7") == 0, "link %s", b);
    }
    struct stat st;
    CHECK(stat("/sys/class/neuron_device/neuron7", &st) == 0 && S_ISDIR(st.st_mode), "stat dir");
    CHECK(lstat("/sys/class/neuron_device/neuron7", &st) == 0 && S_ISLNK(st.st_mode), "lstat");
    CHECK(stat("/sys/module/neuron/version", &st) == 0 && S_ISREG(st.st_mode), "stat file");
    CHECK(access("/sys/devices/virtual/neuron_device/neuron15/reset", R_OK) == 0, "access");
    CHECK(access("/sys/devices/virtual/neuron_device/neuron16", F_OK) != 0, "no neuron16");

    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
