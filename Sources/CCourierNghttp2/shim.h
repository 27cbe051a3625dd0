// nghttp2 (libnghttp2-dev) for CourierHTTP2.
#ifndef C_COURIER_NGHTTP2_H
#define C_COURIER_NGHTTP2_H

#include <nghttp2/nghttp2.h>

#endif
