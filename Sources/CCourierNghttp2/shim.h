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

// MARK: A per-session allocator (nghttp2_mem)
//
// nghttp2 allocates and frees a dozen small blocks for every stream: its stream object, header
// buffers, outbound items. A session is used by one event loop thread only, so its blocks can
// be kept in free lists of its own, by power-of-two size class, and reused without a lock or
// a trip through malloc. Each block starts with a 16-byte header holding its class, so that
// free and realloc know its size. Larger blocks, and blocks beyond a class's cap, go to malloc.

#include <stdlib.h>
#include <string.h>

enum {
    courier_h2_pool_classes = 8,            // 32 bytes to 4 KiB
    courier_h2_pool_smallest_shift = 5,
    courier_h2_pool_header = 16,            // keeps blocks 16-byte aligned, as malloc's are
    courier_h2_pool_cap = 64,               // blocks kept per class: bounds an idle session's memory
    courier_h2_pool_large = 0xFF,
};

typedef struct courier_h2_pool {
    void *free_lists[courier_h2_pool_classes];
    unsigned counts[courier_h2_pool_classes];
} courier_h2_pool;

static inline int courier_h2_pool_class(size_t size) {
    size_t capacity = (size_t)1 << courier_h2_pool_smallest_shift;
    for (int index = 0; index < courier_h2_pool_classes; index++, capacity <<= 1) {
        if (size <= capacity) return index;
    }
    return courier_h2_pool_large;
}

static inline size_t courier_h2_pool_class_size(int index) {
    return (size_t)1 << (index + courier_h2_pool_smallest_shift);
}

static inline void *courier_h2_pool_malloc(size_t size, void *user_data) {
    courier_h2_pool *pool = (courier_h2_pool *)user_data;
    int index = courier_h2_pool_class(size);
    unsigned char *block;
    if (index != courier_h2_pool_large && pool->free_lists[index] != NULL) {
        block = (unsigned char *)pool->free_lists[index];
        memcpy(&pool->free_lists[index], block + courier_h2_pool_header, sizeof(void *));
        pool->counts[index]--;
    } else {
        size_t payload = index == courier_h2_pool_large ? size : courier_h2_pool_class_size(index);
        block = (unsigned char *)malloc(courier_h2_pool_header + payload);
        if (block == NULL) return NULL;
        block[0] = (unsigned char)index;
    }
    return block + courier_h2_pool_header;
}

static inline void courier_h2_pool_free(void *pointer, void *user_data) {
    if (pointer == NULL) return;
    courier_h2_pool *pool = (courier_h2_pool *)user_data;
    unsigned char *block = (unsigned char *)pointer - courier_h2_pool_header;
    int index = block[0];
    if (index == courier_h2_pool_large || pool->counts[index] >= courier_h2_pool_cap) {
        free(block);
        return;
    }
    memcpy(pointer, &pool->free_lists[index], sizeof(void *));
    pool->free_lists[index] = block;
    pool->counts[index]++;
}

static inline void *courier_h2_pool_calloc(size_t count, size_t size, void *user_data) {
    if (size != 0 && count > SIZE_MAX / size) return NULL;
    void *pointer = courier_h2_pool_malloc(count * size, user_data);
    if (pointer != NULL) memset(pointer, 0, count * size);
    return pointer;
}

static inline void *courier_h2_pool_realloc(void *pointer, size_t size, void *user_data) {
    if (pointer == NULL) return courier_h2_pool_malloc(size, user_data);
    if (size == 0) {
        courier_h2_pool_free(pointer, user_data);
        return NULL;
    }
    unsigned char *block = (unsigned char *)pointer - courier_h2_pool_header;
    int index = block[0];
    if (index == courier_h2_pool_large) {
        unsigned char *grown = (unsigned char *)realloc(block, courier_h2_pool_header + size);
        return grown == NULL ? NULL : grown + courier_h2_pool_header;
    }
    size_t capacity = courier_h2_pool_class_size(index);
    if (size <= capacity) return pointer;
    void *moved = courier_h2_pool_malloc(size, user_data);
    if (moved == NULL) return NULL;
    memcpy(moved, pointer, capacity);
    courier_h2_pool_free(pointer, user_data);
    return moved;
}

/// A new pool, or NULL without memory; `mem` is filled in to allocate from it.
static inline courier_h2_pool *courier_h2_pool_create(nghttp2_mem *mem) {
    courier_h2_pool *pool = (courier_h2_pool *)calloc(1, sizeof(courier_h2_pool));
    if (pool == NULL) return NULL;
    mem->mem_user_data = pool;
    mem->malloc = courier_h2_pool_malloc;
    mem->free = courier_h2_pool_free;
    mem->calloc = courier_h2_pool_calloc;
    mem->realloc = courier_h2_pool_realloc;
    return pool;
}

/// Frees the pool and the blocks it keeps; after the session that used it is deleted.
static inline void courier_h2_pool_destroy(courier_h2_pool *pool) {
    if (pool == NULL) return;
    for (int index = 0; index < courier_h2_pool_classes; index++) {
        void *block = pool->free_lists[index];
        while (block != NULL) {
            void *next;
            memcpy(&next, (unsigned char *)block + courier_h2_pool_header, sizeof(void *));
            free(block);
            block = next;
        }
    }
    free(pool);
}

#endif
