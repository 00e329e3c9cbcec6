/* prof_clock.c — the monotonic clock every measurement uses. */
#include <time.h>
#include "prof/prof.h"

double prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
