// The GNU extensions of CCourierLinux: compiled here with _GNU_SOURCE so that the public
// header stays free of feature macros.
#define _GNU_SOURCE
#include <sys/socket.h>
#include <netdb.h>
#include <stddef.h>

int courier_accept4(int fd, int flags) {
    return accept4(fd, NULL, NULL, flags);
}

int courier_eai_nodata(void) {
    return EAI_NODATA;
}

int courier_eai_addrfamily(void) {
    return EAI_ADDRFAMILY;
}
