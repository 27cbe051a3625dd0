// zlib (zlib1g-dev) for CourierPolicies' content decoder: gzip and deflate.
#ifndef C_COURIER_ZLIB_H
#define C_COURIER_ZLIB_H

#include <zlib.h>

/// inflateInit2 is a macro in zlib.h; Swift cannot call macros, so this passes the version and
/// the stream size the macro would.
static inline int courier_inflate_init2(z_streamp stream, int windowBits) {
    return inflateInit2(stream, windowBits);
}

/// deflateInit2, likewise a macro; used by tests and fuzz seeds to make compressed inputs.
static inline int courier_deflate_init2(z_streamp stream, int level, int windowBits) {
    return deflateInit2(stream, level, Z_DEFLATED, windowBits, 8, Z_DEFAULT_STRATEGY);
}

#endif
