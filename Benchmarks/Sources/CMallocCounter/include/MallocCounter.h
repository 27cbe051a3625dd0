// Counts calls to malloc, calloc, realloc and posix_memalign when preloaded (LD_PRELOAD).
#ifndef MALLOC_COUNTER_H
#define MALLOC_COUNTER_H
#include <stdint.h>
/// Allocations made so far by the process.
uint64_t courier_malloc_count(void);
#endif
