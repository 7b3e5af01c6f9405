/* clockstep: step CLOCK_REALTIME of one host's processes, and nothing else.
 *
 * Loaded with LD_PRELOAD into a host's processes by bench/hosts (the chaos harness).
 * The file named by $CORRAL_CLOCKSTEP_FILE holds an offset in seconds (a decimal
 * such as "30" or "-30"); every read of the wall clock (clock_gettime on
 * CLOCK_REALTIME and its coarse form, gettimeofday, time) adds it. The file is read
 * again at most every 50 ms (by CLOCK_MONOTONIC_COARSE), so writing it steps the
 * clock of every running process within 50 ms, as `date -s` would step a machine's.
 * CLOCK_MONOTONIC and every other clock are left alone: a real step does not move
 * them (Linux's time namespaces offset the monotonic clocks only, which is why the
 * harness cannot use them; libfaketime 0.9.10 with its monotonic clock left real
 * fails Python 3.11's time.sleep with EINVAL, which is why this file exists). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

typedef int (*gettime_fn)(clockid_t, struct timespec *);

static gettime_fn real_gettime;
static double offset;
static struct timespec next_read;

static void refresh(void) {
    struct timespec mono;
    if (!real_gettime)
        real_gettime = (gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    real_gettime(CLOCK_MONOTONIC_COARSE, &mono);
    if (mono.tv_sec < next_read.tv_sec ||
        (mono.tv_sec == next_read.tv_sec && mono.tv_nsec < next_read.tv_nsec))
        return;
    next_read = mono;
    next_read.tv_nsec += 50000000L;
    if (next_read.tv_nsec >= 1000000000L) {
        next_read.tv_sec += 1;
        next_read.tv_nsec -= 1000000000L;
    }
    const char *path = getenv("CORRAL_CLOCKSTEP_FILE");
    if (!path)
        return;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    double value;
    if (fscanf(f, "%lf", &value) == 1)
        offset = value;
    fclose(f);
}

static void shift(struct timespec *ts) {
    long long ns = (long long)(offset * 1e9);
    long long sec = ns / 1000000000LL, rest = ns % 1000000000LL;
    ts->tv_sec += sec;
    ts->tv_nsec += rest;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec += 1;
        ts->tv_nsec -= 1000000000L;
    } else if (ts->tv_nsec < 0) {
        ts->tv_sec -= 1;
        ts->tv_nsec += 1000000000L;
    }
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    refresh();
    int rc = real_gettime(clk, ts);
    if (rc == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE))
        shift(ts);
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    if (tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
