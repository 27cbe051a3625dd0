// Brotli (libbrotli-dev) for CourierPolicies' content decoder. The encoder is linked for tests
// and fuzz seeds, which make their compressed inputs with it.
#ifndef C_COURIER_BROTLI_H
#define C_COURIER_BROTLI_H

#include <brotli/decode.h>
#include <brotli/encode.h>

#endif
