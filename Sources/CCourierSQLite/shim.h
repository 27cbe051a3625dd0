// SQLite 3 (libsqlite3-dev) for Courier's on-disk stores: permanent credentials, and later the
// cookie jar and the disk cache.
#ifndef C_COURIER_SQLITE_H
#define C_COURIER_SQLITE_H

#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro (-1 cast to a destructor pointer) that Swift cannot import. It
/// makes SQLite copy the bytes before the call returns, so that Swift's temporary buffer (from
/// withCString, withUnsafeBytes) may go away afterwards.
static inline int courier_sqlite3_bind_text_transient(sqlite3_stmt *statement, int index, const char *text, int length) {
    return sqlite3_bind_text(statement, index, text, length, SQLITE_TRANSIENT);
}

/// The same for a blob.
static inline int courier_sqlite3_bind_blob_transient(sqlite3_stmt *statement, int index, const void *bytes, int length) {
    return sqlite3_bind_blob(statement, index, bytes, length, SQLITE_TRANSIENT);
}

#endif
