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

ssize_t courier_read_cached(int fd, void *buffer, size_t count) {
    struct iovec vector = { .iov_base = buffer, .iov_len = count };
    return preadv2(fd, &vector, 1, -1, RWF_NOWAIT);
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

int courier_make_temporary_file(char *template_path, int suffix_length) {
    return mkostemps(template_path, suffix_length, O_CLOEXEC);
}

void courier_set_thread_name(const char *name) {
    char shortened[16];
    strncpy(shortened, name, sizeof(shortened) - 1);
    shortened[sizeof(shortened) - 1] = 0;
    pthread_setname_np(pthread_self(), shortened);
}
