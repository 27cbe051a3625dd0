// The field-line scanner of CCourierScan.h. Written for the common head: short names of
// letters, digits and '-', values of a few dozen printable bytes, CRLF line ends. The vector
// loops only ever load sixteen bytes that lie inside the buffer; what is left at its end is
// read byte by byte.
#include "CCourierScan.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// RFC 9110 tchar: bit n of the first mask is byte n, of the second byte 64 + n; no byte
// from 128 up is one. The same masks as HTTPFieldValidation.isTokenCharacter.
static inline int is_token_byte(uint8_t byte) {
    static const uint64_t low = 0x03FF6CFA00000000ULL;
    static const uint64_t high = 0x57FFFFFFC7FFFFFEULL;
    if (byte >= 0x80) return 0;
    uint64_t mask = byte < 0x40 ? low : high;
    return (int)((mask >> (byte & 0x3F)) & 1);
}

// HTAB, SP, VCHAR or obs-text.
static inline int is_value_byte(uint8_t byte) {
    return byte == 0x09 || (byte >= 0x20 && byte != 0x7F);
}

static inline int is_optional_whitespace(uint8_t byte) {
    return byte == ' ' || byte == '\t';
}

size_t courier_token_prefix_count(const uint8_t *bytes, size_t count) {
    size_t index = 0;
#if defined(__SSE2__)
    // Letters, digits and '-' sixteen at a time; the first other byte ends the vector part
    // (a colon ends the name; another tchar such as '_' goes on byte by byte).
    const __m128i letter_shift = _mm_set1_epi8((char)(0x80 - 'a'));
    const __m128i letter_limit = _mm_set1_epi8((char)(-128 + 26));
    const __m128i digit_shift = _mm_set1_epi8((char)(0x80 - '0'));
    const __m128i digit_limit = _mm_set1_epi8((char)(-128 + 10));
    const __m128i case_bit = _mm_set1_epi8(0x20);
    const __m128i dash = _mm_set1_epi8('-');
    while (index + 16 <= count) {
        __m128i chunk = _mm_loadu_si128((const __m128i *)(bytes + index));
        // A byte moved so that its range starts at -128 is in the range when below
        // -128 + the range's length (signed comparison).
        __m128i lowered = _mm_or_si128(chunk, case_bit);
        __m128i letter = _mm_cmplt_epi8(_mm_add_epi8(lowered, letter_shift), letter_limit);
        __m128i digit = _mm_cmplt_epi8(_mm_add_epi8(chunk, digit_shift), digit_limit);
        __m128i plain = _mm_or_si128(_mm_or_si128(letter, digit), _mm_cmpeq_epi8(chunk, dash));
        unsigned others = ~(unsigned)_mm_movemask_epi8(plain) & 0xFFFFu;
        if (others != 0) {
            index += (size_t)__builtin_ctz(others);
            // The usual end of a field name: no need to look it up.
            if (bytes[index] == ':') return index;
            break;
        }
        index += 16;
    }
#endif
    while (index < count && is_token_byte(bytes[index])) index += 1;
    return index;
}

size_t courier_field_value_prefix_count(const uint8_t *bytes, size_t count) {
    size_t index = 0;
#if defined(__SSE2__)
    // Refused: 0x00-0x1F but HTAB, and DEL.
    const __m128i control_top = _mm_set1_epi8(0x1F);
    const __m128i tab = _mm_set1_epi8(0x09);
    const __m128i delete = _mm_set1_epi8(0x7F);
    while (index + 16 <= count) {
        __m128i chunk = _mm_loadu_si128((const __m128i *)(bytes + index));
        __m128i control = _mm_cmpeq_epi8(_mm_max_epu8(chunk, control_top), control_top);
        __m128i refused = _mm_or_si128(_mm_andnot_si128(_mm_cmpeq_epi8(chunk, tab), control),
                                       _mm_cmpeq_epi8(chunk, delete));
        unsigned found = (unsigned)_mm_movemask_epi8(refused);
        if (found != 0) return index + (size_t)__builtin_ctz(found);
        index += 16;
    }
#endif
    while (index < count && is_value_byte(bytes[index])) index += 1;
    return index;
}

// Where the line whose content stops at `stop` is followed by the next: after its CRLF, or
// its bare LF where allowed; 0 (never a valid answer, the line end being at least one byte
// in) when `stop` holds anything else.
static inline size_t next_line(const uint8_t *bytes, size_t count, size_t stop, int allows_bare_line_feed) {
    if (bytes[stop] == '\r') return stop + 1 < count && bytes[stop + 1] == '\n' ? stop + 2 : 0;
    return bytes[stop] == '\n' && allows_bare_line_feed ? stop + 1 : 0;
}

long courier_scan_field_lines(
    const uint8_t *bytes, size_t count, size_t start, int allows_bare_line_feed,
    courier_field_location *locations, size_t capacity, size_t *next, int *finished, uint64_t *name_bits) {
    if (count > UINT32_MAX) return -1;
    size_t line = start;
    size_t fields = 0;
    uint64_t bits = 0;
    while (line < count) {
        if (bytes[line] == '\r' || bytes[line] == '\n') {
            // The empty line, which ends the section.
            size_t after = next_line(bytes, count, line, allows_bare_line_feed);
            if (after == 0) return -1;
            *next = after;
            *finished = 1;
            *name_bits |= bits;
            return (long)fields;
        }
        if (fields == capacity) {
            *next = line;
            *finished = 0;
            *name_bits |= bits;
            return (long)fields;
        }
        size_t name_end = line + courier_token_prefix_count(bytes + line, count - line);
        if (name_end == line || name_end >= count || bytes[name_end] != ':') return -1;
        // Most values follow one space; any more whitespace is skipped byte by byte.
        size_t value_start = name_end + 1;
        if (value_start < count && bytes[value_start] == ' ') value_start += 1;
        while (value_start < count && is_optional_whitespace(bytes[value_start])) value_start += 1;
        size_t stop = value_start + courier_field_value_prefix_count(bytes + value_start, count - value_start);
        if (stop >= count) return -1;
        size_t after = next_line(bytes, count, stop, allows_bare_line_feed);
        if (after == 0) return -1;
        size_t value_end = stop;
        if (value_end > value_start && bytes[value_end - 1] > ' ') {
            // The usual value, with nothing to trim.
        } else {
            while (value_end > value_start && is_optional_whitespace(bytes[value_end - 1])) value_end -= 1;
        }
        uint64_t mixed = (uint64_t)(name_end - line) * 7 + (uint64_t)(bytes[line] | 0x20) * 3
            + (uint64_t)(bytes[name_end - 1] | 0x20);
        bits |= (uint64_t)1 << (mixed & 63);
        locations[fields].name_start = (uint32_t)line;
        locations[fields].name_end = (uint32_t)name_end;
        locations[fields].value_start = (uint32_t)value_start;
        locations[fields].value_end = (uint32_t)value_end;
        fields += 1;
        line = after;
    }
    return -1;
}
