// A C target needs a source file; hop-floor needs only the header.
#include "CHopFloor.h"
