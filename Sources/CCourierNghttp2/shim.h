// nghttp2 (libnghttp2-dev) for CourierHTTP2: accessors for the frame union and the data
// provider, which are awkward to reach from Swift.
#ifndef C_COURIER_NGHTTP2_H
#define C_COURIER_NGHTTP2_H

#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stddef.h>

static inline uint8_t courier_nghttp2_frame_type(const nghttp2_frame *frame) { return frame->hd.type; }
static inline uint8_t courier_nghttp2_frame_flags(const nghttp2_frame *frame) { return frame->hd.flags; }
static inline int32_t courier_nghttp2_frame_stream_id(const nghttp2_frame *frame) { return frame->hd.stream_id; }
static inline int courier_nghttp2_headers_category(const nghttp2_frame *frame) { return (int)frame->headers.cat; }
static inline int32_t courier_nghttp2_goaway_last_stream_id(const nghttp2_frame *frame) { return frame->goaway.last_stream_id; }
static inline uint32_t courier_nghttp2_goaway_error_code(const nghttp2_frame *frame) { return frame->goaway.error_code; }
static inline uint32_t courier_nghttp2_rst_stream_error_code(const nghttp2_frame *frame) { return frame->rst_stream.error_code; }

/// The value of one setting in a SETTINGS frame, or -1 when the frame does not carry it.
static inline int64_t courier_nghttp2_settings_value(const nghttp2_frame *frame, int32_t id) {
    for (size_t index = 0; index < frame->settings.niv; index++) {
        if (frame->settings.iv[index].settings_id == id) return frame->settings.iv[index].value;
    }
    return -1;
}

/// A data provider with no source of its own: the read callback finds the stream's body by
/// the stream id nghttp2 passes it.
static inline nghttp2_data_provider courier_nghttp2_data_provider(nghttp2_data_source_read_callback callback) {
    nghttp2_data_provider provider;
    provider.source.ptr = NULL;
    provider.read_callback = callback;
    return provider;
}

#endif
