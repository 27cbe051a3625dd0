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
#include <stdlib.h>
#include <string.h>

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

static inline uint64_t courier_SSL_OP_NO_RENEGOTIATION(void) { return SSL_OP_NO_RENEGOTIATION; }
static inline uint64_t courier_SSL_OP_NO_COMPRESSION(void) { return SSL_OP_NO_COMPRESSION; }

static inline int courier_sk_X509_num(const STACK_OF(X509) *stack) { return sk_X509_num(stack); }
static inline X509 *courier_sk_X509_value(const STACK_OF(X509) *stack, int index) { return sk_X509_value(stack, index); }
static inline STACK_OF(X509) *courier_sk_X509_new_null(void) { return sk_X509_new_null(); }
static inline int courier_sk_X509_push(STACK_OF(X509) *stack, X509 *certificate) { return sk_X509_push(stack, certificate); }
static inline void courier_sk_X509_pop_free(STACK_OF(X509) *stack) { sk_X509_pop_free(stack, X509_free); }
static inline void courier_sk_X509_free(STACK_OF(X509) *stack) { sk_X509_free(stack); }
static inline int courier_sk_X509_OBJECT_num(const STACK_OF(X509_OBJECT) *stack) { return sk_X509_OBJECT_num(stack); }
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

/* The engine's input BIO: received ciphertext kept in a plain growing buffer until OpenSSL
 * reads it. OpenSSL's memory BIO zeroes the space for every write before copying into it
 * (BUF_MEM_grow_clean): a second pass over every byte received. Reads past the bytes say
 * "retry" until courier_input_end, then report the end, as a memory BIO whose EOF return is
 * -1 does. Used from the engine's thread only. */
typedef struct {
    unsigned char *bytes;
    size_t start;    /* the first unread byte */
    size_t end;      /* one past the last byte */
    size_t capacity;
    int ended;       /* the network connection ended */
} courier_input_state;

static inline int courier_input_create(BIO *bio) {
    courier_input_state *state = (courier_input_state *)calloc(1, sizeof(courier_input_state));
    if (state == NULL) return 0;
    BIO_set_data(bio, state);
    BIO_set_init(bio, 1);
    return 1;
}

static inline int courier_input_destroy(BIO *bio) {
    courier_input_state *state = (courier_input_state *)BIO_get_data(bio);
    if (state != NULL) {
        free(state->bytes);
        free(state);
    }
    BIO_set_data(bio, NULL);
    return 1;
}

static inline int courier_input_read(BIO *bio, char *out, int length) {
    courier_input_state *state = (courier_input_state *)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    size_t available = state->end - state->start;
    if (available == 0) {
        if (state->ended) return 0;
        BIO_set_retry_read(bio);
        return -1;
    }
    size_t count = length < 0 ? 0 : (size_t)length;
    if (count > available) count = available;
    memcpy(out, state->bytes + state->start, count);
    state->start += count;
    if (state->start == state->end) state->start = state->end = 0;
    return (int)count;
}

static inline long courier_input_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)number;
    (void)pointer;
    courier_input_state *state = (courier_input_state *)BIO_get_data(bio);
    switch (command) {
    case BIO_CTRL_PENDING: return (long)(state->end - state->start);
    case BIO_CTRL_EOF: return state->ended && state->start == state->end;
    case BIO_CTRL_FLUSH: return 1;
    default: return 0;
    }
}

/* A new method for input BIOs; NULL when OpenSSL could not make one. Made once, by the
 * engine (a Swift global). */
static inline BIO_METHOD *courier_input_new_method(void) {
    BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "courier input");
    if (method == NULL) return NULL;
    BIO_meth_set_create(method, courier_input_create);
    BIO_meth_set_destroy(method, courier_input_destroy);
    BIO_meth_set_read(method, courier_input_read);
    BIO_meth_set_ctrl(method, courier_input_ctrl);
    return method;
}

/* Makes at least `length` bytes free after the unread ones: the unread bytes move to the
 * front, or the buffer grows (doubling from 16 KiB). 0 when memory ran out. */
static inline int courier_input_reserve(courier_input_state *state, size_t length) {
    if (state->capacity - state->end < length && state->start > 0) {
        memmove(state->bytes, state->bytes + state->start, state->end - state->start);
        state->end -= state->start;
        state->start = 0;
    }
    if (state->capacity - state->end < length) {
        size_t wanted = state->end + length;
        size_t capacity = state->capacity > 0 ? state->capacity : 16384;
        while (capacity < wanted) capacity *= 2;
        unsigned char *grown = (unsigned char *)realloc(state->bytes, capacity);
        if (grown == NULL) return 0;
        state->bytes = grown;
        state->capacity = capacity;
    }
    return 1;
}

/* Adds received bytes after those not yet read; 0 when memory ran out (nothing is added).
 * Bytes read straight into the space courier_input_space gave are added where they are. */
static inline int courier_input_append(BIO *bio, const void *bytes, size_t length) {
    courier_input_state *state = (courier_input_state *)BIO_get_data(bio);
    if (state->bytes != NULL && bytes == state->bytes + state->end && length <= state->capacity - state->end) {
        state->end += length;
        return 1;
    }
    if (!courier_input_reserve(state, length)) return 0;
    memcpy(state->bytes + state->end, bytes, length);
    state->end += length;
    return 1;
}

/* The free space after the unread bytes, at least `minimum` bytes, for the socket to read
 * into: courier_input_append then adds what was read without copying it. NULL when memory ran
 * out. Valid until the next call on the BIO. */
static inline void *courier_input_space(BIO *bio, size_t minimum, size_t *length) {
    courier_input_state *state = (courier_input_state *)BIO_get_data(bio);
    if (!courier_input_reserve(state, minimum)) return NULL;
    *length = state->capacity - state->end;
    return state->bytes + state->end;
}

/* The network connection ended: reads past the bytes now report the end. */
static inline void courier_input_end(BIO *bio) {
    ((courier_input_state *)BIO_get_data(bio))->ended = 1;
}

/* The state of an input BIO, for the engine to see what it holds without a call into OpenSSL. */
static inline const courier_input_state *courier_input_state_of(BIO *bio) {
    return (const courier_input_state *)BIO_get_data(bio);
}

/* The engine's output BIO: the ciphertext OpenSSL writes, kept in a plain growing buffer until
 * the transport takes it where it lies (courier_output_consume). Through a memory BIO each
 * record took a write into its buffer, a read back out of it, and a control call into
 * OpenSSL for every question of what was pending; here the engine reads the length from the
 * state. Used from the engine's thread only. */
typedef struct {
    unsigned char *bytes;
    size_t length;   /* bytes waiting to be sent, from the start of `bytes` */
    size_t capacity;
} courier_output_state;

static inline int courier_output_create(BIO *bio) {
    courier_output_state *state = (courier_output_state *)calloc(1, sizeof(courier_output_state));
    if (state == NULL) return 0;
    BIO_set_data(bio, state);
    BIO_set_init(bio, 1);
    return 1;
}

static inline int courier_output_destroy(BIO *bio) {
    courier_output_state *state = (courier_output_state *)BIO_get_data(bio);
    if (state != NULL) {
        free(state->bytes);
        free(state);
    }
    BIO_set_data(bio, NULL);
    return 1;
}

/* Appends what OpenSSL wrote; -1 (nothing kept) when memory ran out, which fails the write. The
 * buffer doubles from 4 KiB: a connection that only sends small requests keeps a small one. */
static inline int courier_output_write(BIO *bio, const char *bytes, int length) {
    courier_output_state *state = (courier_output_state *)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    if (length <= 0) return 0;
    size_t count = (size_t)length;
    if (state->capacity - state->length < count) {
        size_t wanted = state->length + count;
        size_t capacity = state->capacity > 0 ? state->capacity : 4096;
        while (capacity < wanted) capacity *= 2;
        unsigned char *grown = (unsigned char *)realloc(state->bytes, capacity);
        if (grown == NULL) return -1;
        state->bytes = grown;
        state->capacity = capacity;
    }
    memcpy(state->bytes + state->length, bytes, count);
    state->length += count;
    return length;
}

static inline long courier_output_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)number;
    (void)pointer;
    courier_output_state *state = (courier_output_state *)BIO_get_data(bio);
    switch (command) {
    case BIO_CTRL_PENDING:
    case BIO_CTRL_WPENDING: return (long)state->length;
    case BIO_CTRL_FLUSH: return 1;
    default: return 0;
    }
}

/* A new method for output BIOs; NULL when OpenSSL could not make one. Made once, by the
 * engine (a Swift global). */
static inline BIO_METHOD *courier_output_new_method(void) {
    BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "courier output");
    if (method == NULL) return NULL;
    BIO_meth_set_create(method, courier_output_create);
    BIO_meth_set_destroy(method, courier_output_destroy);
    BIO_meth_set_write(method, courier_output_write);
    BIO_meth_set_ctrl(method, courier_output_ctrl);
    return method;
}

/* The state of an output BIO: the engine reads the waiting bytes from it. */
static inline courier_output_state *courier_output_state_of(BIO *bio) {
    return (courier_output_state *)BIO_get_data(bio);
}

/* Forgets the first `count` waiting bytes (sent, or copied out); any after them move to the
 * front. */
static inline void courier_output_consume(courier_output_state *state, size_t count) {
    if (count >= state->length) {
        state->length = 0;
        return;
    }
    memmove(state->bytes, state->bytes + count, state->length - count);
    state->length -= count;
}

#endif
