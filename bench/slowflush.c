// A slower disk, for benchmarks: loaded into PostgreSQL (LD_PRELOAD) by scripts/with-postgres when
// SYNCGATE_PG_FLUSH_DELAY_US is set, it adds that many microseconds to every fsync and fdatasync,
// as on network block storage, where a flush takes ~0.5–2 ms instead of this machine's ~0.08 ms.
// Commits that share a flush (group commit) share its delay too, as on such a disk.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void wait_for_the_disk(void) {
    const char *text = getenv("SYNCGATE_PG_FLUSH_DELAY_US");
    long micros = text ? atol(text) : 0;
    if (micros <= 0) return;
    struct timespec delay = { micros / 1000000, (micros % 1000000) * 1000 };
    while (nanosleep(&delay, &delay) != 0) {}
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    wait_for_the_disk();
    return real(fd);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    wait_for_the_disk();
    return real(fd);
}
