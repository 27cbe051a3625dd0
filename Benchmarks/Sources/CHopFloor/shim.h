// The Linux, OpenSSL and nghttp2 interfaces hop-floor uses that Glibc's Swift module leaves out.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
