// Preloaded into the clients that instructions.py runs under valgrind 3.19 (Debian bookworm's).
//
// A Swift program whose top-level code awaits parks its main thread in dispatch_main(), which
// calls sigsuspend() with a signal mask kept in libdispatch's read-only data. Valgrind 3.19's
// wrapper of rt_sigsuspend writes into the mask it is given, faults on that page, and dies
// ("VALGRIND INTERNAL ERROR ... signal 11"). This sigsuspend hands the kernel a copy on the stack:
// the same call, with a mask valgrind may write.
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    // The kernel's sigset_t is 8 bytes on x86-64; glibc's is larger and only its head counts.
    return (int)syscall(SYS_rt_sigsuspend, &copy, 8);
}
