// OpenSSL (libssl-dev) for CourierTLS. Function-like macros that Swift cannot import get
// static inline wrappers here.
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

#endif
