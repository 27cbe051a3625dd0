// libpsl (libpsl-dev) for CourierPolicies' cookie jar: which domains are public suffixes
// (a cookie may not be set for "co.uk"), and the registrable domain that makes a site.
#ifndef C_COURIER_PSL_H
#define C_COURIER_PSL_H

#include <libpsl.h>

#endif
