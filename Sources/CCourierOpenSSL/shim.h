// OpenSSL (libssl-dev) for CourierTLS. Function-like macros and macro-generated stack accessors
// that Swift cannot import get static inline wrappers here, prefixed courier_.
#ifndef C_COURIER_OPENSSL_H
#define C_COURIER_OPENSSL_H

#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/evp.h>
#include <openssl/bio.h>
#include <openssl/tls1.h>

static inline int courier_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}

static inline int courier_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_max_proto_version(ctx, version);
}

static inline long courier_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return SSL_set_tlsext_host_name(ssl, name);
}

static inline long courier_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}

static inline long courier_SSL_CTX_set_session_cache_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_session_cache_mode(ctx, mode);
}

static inline long courier_BIO_set_mem_eof_return(BIO *bio, int value) {
    return BIO_set_mem_eof_return(bio, value);
}

static inline size_t courier_BIO_pending(BIO *bio) {
    return BIO_ctrl_pending(bio);
}

static inline uint64_t courier_SSL_OP_NO_RENEGOTIATION(void) { return SSL_OP_NO_RENEGOTIATION; }
static inline uint64_t courier_SSL_OP_NO_COMPRESSION(void) { return SSL_OP_NO_COMPRESSION; }

static inline int courier_sk_X509_num(const STACK_OF(X509) *stack) { return sk_X509_num(stack); }
static inline X509 *courier_sk_X509_value(const STACK_OF(X509) *stack, int index) { return sk_X509_value(stack, index); }
static inline STACK_OF(X509) *courier_sk_X509_new_null(void) { return sk_X509_new_null(); }
static inline int courier_sk_X509_push(STACK_OF(X509) *stack, X509 *certificate) { return sk_X509_push(stack, certificate); }
static inline void courier_sk_X509_pop_free(STACK_OF(X509) *stack) { sk_X509_pop_free(stack, X509_free); }
static inline void courier_sk_X509_free(STACK_OF(X509) *stack) { sk_X509_free(stack); }
static inline int courier_sk_X509_NAME_num(const STACK_OF(X509_NAME) *stack) { return sk_X509_NAME_num(stack); }
static inline X509_NAME *courier_sk_X509_NAME_value(const STACK_OF(X509_NAME) *stack, int index) { return sk_X509_NAME_value(stack, index); }
static inline int courier_sk_GENERAL_NAME_num(const STACK_OF(GENERAL_NAME) *stack) { return sk_GENERAL_NAME_num(stack); }
static inline GENERAL_NAME *courier_sk_GENERAL_NAME_value(const STACK_OF(GENERAL_NAME) *stack, int index) { return sk_GENERAL_NAME_value(stack, index); }
static inline void courier_GENERAL_NAMES_free(STACK_OF(GENERAL_NAME) *names) { GENERAL_NAMES_free(names); }

static inline void courier_OPENSSL_free(void *pointer) { OPENSSL_free(pointer); }

/// An ex_data index for SSL objects, to find the Swift engine from inside a callback.
static inline int courier_SSL_get_ex_new_index(void) {
    return SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

#endif
