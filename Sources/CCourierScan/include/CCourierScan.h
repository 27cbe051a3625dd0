// Byte scanners for the HTTP/1 response parser: the field lines of a head, found and checked
// sixteen bytes at a time where the processor has SSE2, byte by byte elsewhere.
#ifndef C_COURIER_SCAN_H
#define C_COURIER_SCAN_H

#include <stddef.h>
#include <stdint.h>

/// Where one field line's name and value are, as byte offsets into the scanned buffer: the
/// name from `name_start` to `name_end` (the colon), the value from `value_start` to
/// `value_end`, its leading and trailing spaces and tabs left out.
typedef struct {
    uint32_t name_start;
    uint32_t name_end;
    uint32_t value_start;
    uint32_t value_end;
} courier_field_location;

/// Reads the field lines of `bytes[0..<count]` from offset `start`, writing each line's
/// location to `locations`, until it has read the empty line that ends them or written
/// `capacity` locations. Returns the number written and sets `*next` where it stopped: just
/// past the empty line, with `*finished` set to 1, or at the start of the next field line,
/// with `*finished` 0 (the caller takes the locations and calls again from there).
///
/// Only plain lines are taken: a name of one or more RFC 9110 `tchar`s, a colon, optional
/// whitespace, a value of HTAB, SP, VCHAR and obs-text, then CRLF (or a bare LF where
/// `allows_bare_line_feed` is not 0). Returns -1, with the outputs left meaningless, for
/// anything else: a line that breaks those rules (a folded one, a bare CR, a control in a
/// value, a space before the colon), no empty line within `count`, or `count` over 4 GiB.
/// A caller then reads the same bytes the slow way, which names what is wrong.
///
/// Each line's name also sets its bit in `*name_bits`: bit (n × 7 + (f | 0x20) × 3 + (l | 0x20))
/// mod 64 for a name of n bytes whose first and last are f and l, the bit
/// `HTTPFields.nameBit(count:first:last:)` gives it.
long courier_scan_field_lines(
    const uint8_t *bytes, size_t count, size_t start, int allows_bare_line_feed,
    courier_field_location *locations, size_t capacity, size_t *next, int *finished, uint64_t *name_bits);

/// The number of bytes at the start of `bytes[0..<count]` that are RFC 9110 `tchar`s.
size_t courier_token_prefix_count(const uint8_t *bytes, size_t count);

/// The number of bytes at the start of `bytes[0..<count]` that may appear in a field value
/// (HTAB, SP, VCHAR, obs-text).
size_t courier_field_value_prefix_count(const uint8_t *bytes, size_t count);

#endif
