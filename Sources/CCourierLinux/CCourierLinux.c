// The GNU extensions of CCourierLinux: compiled here with _GNU_SOURCE so that the public
// header stays free of feature macros.
#define _GNU_SOURCE
#include <sys/socket.h>
#include <sys/uio.h>
#include <netdb.h>
#include <stddef.h>
#include <sched.h>
#include <unistd.h>
#include <stdlib.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <linux/futex.h>
#include <stdint.h>
#include <errno.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#include <asm/hwcap.h>
#endif

ssize_t courier_read_cached(int fd, void *buffer, size_t count) {
    struct iovec vector = { .iov_base = buffer, .iov_len = count };
    return preadv2(fd, &vector, 1, -1, RWF_NOWAIT);
}

// Both keep errno as it was: a lock taken or given up between a failing call and the caller's
// read of errno must not change what the caller reads.
void courier_lock_wait(void *word, uint32_t expected) {
    int saved = errno;
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
    errno = saved;
}

void courier_lock_wake_one(void *word) {
    int saved = errno;
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    errno = saved;
}

const char *courier_secure_getenv(const char *name) {
    return secure_getenv(name);
}

int courier_accept4(int fd, int flags) {
    return accept4(fd, NULL, NULL, flags);
}

int courier_eai_nodata(void) {
    return EAI_NODATA;
}

int courier_eai_addrfamily(void) {
    return EAI_ADDRFAMILY;
}

int courier_available_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int count = CPU_COUNT(&set);
        if (count > 0) return count;
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

int courier_has_aes_hardware(void) {
#if defined(__x86_64__) || defined(__i386__)
    // AES-NI and carry-less multiplication (GCM's GHASH): CPUID leaf 1, ECX bits 25 and 1.
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx & bit_AES) && (ecx & bit_PCLMUL);
#elif defined(__aarch64__)
    unsigned long features = getauxval(AT_HWCAP);
    return (features & HWCAP_AES) && (features & HWCAP_PMULL);
#else
    return 0;
#endif
}

int courier_make_temporary_file(char *template_path, int suffix_length) {
    return mkostemps(template_path, suffix_length, O_CLOEXEC);
}

int courier_set_batch_policy(int batch) {
    // On Linux sched_setscheduler with 0 acts on the calling thread, not the whole process,
    // and for these two policies it keeps the thread's nice value.
    struct sched_param parameters = { .sched_priority = 0 };
    return sched_setscheduler(0, batch ? SCHED_BATCH : SCHED_OTHER, &parameters) == 0 ? 0 : errno;
}

int courier_current_thread_id(void) {
    return (int)syscall(SYS_gettid);
}

int courier_thread_policy(int thread_id) {
    return sched_getscheduler(thread_id);
}

void courier_set_thread_name(const char *name) {
    char shortened[16];
    strncpy(shortened, name, sizeof(shortened) - 1);
    shortened[sizeof(shortened) - 1] = 0;
    pthread_setname_np(pthread_self(), shortened);
}
