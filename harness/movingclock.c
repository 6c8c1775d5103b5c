/* A server's wall clock that moves MOVINGCLOCK_STEP_US microseconds further at each read, on top
 * of real time (LD_PRELOAD; `redis_lock_harness::clock::moving_clock_env`): time passes between
 * any two reads, as on a very slow machine. Only gettimeofday, which Redis's ustime()/mstime()
 * read; the monotonic clock (leases) is left alone. No libc call that allocates: jemalloc
 * reads the clock while it starts, where libfaketime recurses. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long step_us = -1;
static long long moved_us = 0;

static long long real_us(void) {
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    if (step_us < 0) {
        const char *s = getenv("MOVINGCLOCK_STEP_US");
        step_us = s ? atoll(s) : 0;
    }
    /* Atomic: the server's background threads read the clock too; each read moves it. */
    long long now = real_us() + __atomic_add_fetch(&moved_us, step_us, __ATOMIC_RELAXED);
    tv->tv_sec = now / 1000000;
    tv->tv_usec = now % 1000000;
    return 0;
}
