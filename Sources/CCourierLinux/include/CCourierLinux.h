// Courier's window onto the Linux system calls that Glibc's Swift module does not import:
// epoll, eventfd, preadv2 with its flags, and a few socket constants that come through as
// macros or C enums.
#ifndef C_COURIER_LINUX_H
#define C_COURIER_LINUX_H


#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <signal.h>
#include <stdint.h>

// epoll event bits, as plain integers (the header declares them as an enum plus macros).
static const uint32_t courier_EPOLLIN = EPOLLIN;
static const uint32_t courier_EPOLLOUT = EPOLLOUT;
static const uint32_t courier_EPOLLERR = EPOLLERR;
static const uint32_t courier_EPOLLHUP = EPOLLHUP;
static const uint32_t courier_EPOLLRDHUP = EPOLLRDHUP;

static const int courier_EPOLL_CTL_ADD = EPOLL_CTL_ADD;
static const int courier_EPOLL_CTL_MOD = EPOLL_CTL_MOD;
static const int courier_EPOLL_CTL_DEL = EPOLL_CTL_DEL;
static const int courier_EPOLL_CLOEXEC = EPOLL_CLOEXEC;
static const int courier_EFD_CLOEXEC = EFD_CLOEXEC;
static const int courier_EFD_NONBLOCK = EFD_NONBLOCK;

static const int courier_SOCK_NONBLOCK = SOCK_NONBLOCK;
static const int courier_SOCK_CLOEXEC = SOCK_CLOEXEC;
static const int courier_SOCK_STREAM = SOCK_STREAM;
static const int courier_MSG_NOSIGNAL = MSG_NOSIGNAL;

/// The credentials SO_PEERCRED fills: glibc's `struct ucred`, which it declares only under
/// _GNU_SOURCE (defining that here would make this module's system types differ from
/// Dispatch's, and the build fails).
struct courier_peer_credentials {
    pid_t pid;
    uid_t uid;
    gid_t gid;
};

#ifndef SO_PEERCRED
#define SO_PEERCRED 17
#endif

/// The user id of the process at the other end of a connected Unix socket, or -1.
static inline long long courier_peer_uid(int fd) {
    struct courier_peer_credentials credentials;
    socklen_t length = sizeof(credentials);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
    return (long long)credentials.uid;
}

/// Reads the 64-bit payload of an epoll event (the struct is packed on x86-64, which Swift
/// cannot always read field by field).
static inline uint64_t courier_epoll_event_data(const struct epoll_event *event) {
    return event->data.u64;
}

static inline uint32_t courier_epoll_event_events(const struct epoll_event *event) {
    return event->events;
}

/// Adds, modifies or deletes an epoll registration carrying a 64-bit token.
static inline int courier_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t token) {
    struct epoll_event event;
    event.events = events;
    event.data.u64 = token;
    return epoll_ctl(epfd, op, fd, &event);
}

// GNU extensions live in CCourierLinux.c, compiled with _GNU_SOURCE; defining that macro in
// this header would change the system headers under every module that imports it.

/// accept4(fd, NULL, NULL, flags).
int courier_accept4(int fd, int flags);

/// mkostemps(template, suffix_length, O_CLOEXEC): creates a file named after `template` (its
/// XXXXXX replaced), open for writing and closed on exec from the start.
int courier_make_temporary_file(char *template_path, int suffix_length);

/// CPUs this process may run on (its affinity mask), at least 1.
int courier_available_cpus(void);

/// 1 when the processor has instructions for AES and for GCM's multiplication (AES-NI and
/// PCLMULQDQ on x86, the AES and PMULL extensions on ARMv8), else 0.
int courier_has_aes_hardware(void);

/// Names the calling thread for the system (ps, top, perf, /proc/thread-self/comm): at most
/// 15 bytes of `name` are kept.
void courier_set_thread_name(const char *name);

/// Moves the calling thread to SCHED_BATCH (`batch` non-zero) or back to SCHED_OTHER, keeping
/// its nice value. 0 on success, else the error number.
int courier_set_batch_policy(int batch);

/// The kernel's ID of the calling thread.
int courier_current_thread_id(void);

/// The scheduling policy of thread `thread_id` (0: the calling thread), as sched_getscheduler
/// gives it (SCHED_OTHER 0, SCHED_BATCH 3, with SCHED_RESET_ON_FORK added when the thread has
/// that flag), or -1.
int courier_thread_policy(int thread_id);

/// getaddrinfo's EAI_NODATA.
int courier_eai_nodata(void);

/// getaddrinfo's EAI_ADDRFAMILY.
int courier_eai_addrfamily(void);

/// Reads up to `count` bytes from the file's position into `buffer` only as far as the page
/// cache holds them: preadv2 with RWF_NOWAIT, which fails with EAGAIN rather than wait for the
/// disk. Returns what preadv2 does (-1 with errno set on failure).
ssize_t courier_read_cached(int fd, void *buffer, size_t count);

/// getenv, except in a process started with privileges its file gave it (setuid or setgid, file
/// capabilities): NULL then, as OpenSSL reads its own variables (SSL_CERT_FILE, SSL_CERT_DIR).
/// glibc's secure_getenv, which needs _GNU_SOURCE.
const char *courier_secure_getenv(const char *name);

/// Sleeps in the kernel while the 32-bit lock word at `word` still holds `expected` (a private
/// futex wait, no timeout). Returns early on a signal or a spurious wake-up: callers look again.
void courier_lock_wait(void *word, uint32_t expected);

/// Wakes one thread sleeping in ``courier_lock_wait`` on `word` (a private futex wake).
void courier_lock_wake_one(void *word);

/// Tells the CPU the caller is spinning (x86's `pause`, Arm's `yield`).
static inline void courier_spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/// Size in bytes of one epoll event, for allocating event arrays from Swift.
static inline size_t courier_epoll_event_size(void) { return sizeof(struct epoll_event); }

/// ThreadSanitizer's annotations, declared weak: both are null unless the program was linked
/// with ThreadSanitizer's runtime (`-sanitize=thread`), and then they tell it that a release on
/// `address` happens before every later acquire on it.
extern void __tsan_acquire(void *address) __attribute__((weak));
extern void __tsan_release(void *address) __attribute__((weak));

/// After taking a lock: its holder sees what the previous holder wrote (for ThreadSanitizer).
static inline void courier_tsan_acquire(void *address) {
    if (__tsan_acquire) __tsan_acquire(address);
}

/// Before giving a lock up (for ThreadSanitizer).
static inline void courier_tsan_release(void *address) {
    if (__tsan_release) __tsan_release(address);
}

#endif
