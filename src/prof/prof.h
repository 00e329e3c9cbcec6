/*
 * prof.h — the public face of src/prof (measurements and the run log).
 * Filled in by the profiling work; kept so the module exists from the start.
 */
#ifndef CFLOW_PROF_H
#define CFLOW_PROF_H
#include <stdint.h>
/* Monotonic clock in seconds. */
double prof_now(void);
#endif
