/* The library as a whole: error strings for the PLOG_E* codes (plog.h), the ABI version the
 * Python side checks at import, and the version string of this build. */
#include "internal.h"

#include <string.h>

static const char *const messages[] = {
    "data ends inside a batch",
    "corrupt batch: size field out of range",
    "corrupt batch: CRC mismatch",
    "invalid magic byte",
    "batch larger than the maximum allowed size",
    "offsets are not strictly increasing",
    "corrupt record inside a batch",
    "index is full",
    "offset does not fit the segment (relative offset overflow)",
    "output buffer too small",
    "invalid argument",
    "append starts below the log end offset",
    "index file is corrupt",
    "Python I/O callback raised",
    "no complete batch in the appended data",
    "appended data larger than the segment size",
    "the segment must roll before this append",
    "invalid timestamp in a producer batch",
    "the caller must check the batch's records first",
    "the caller must check the batch's producer state first",
    "the roll rule needs the time",
};

const char *plog_strerror(int rc) {
    if (rc == 0) return "ok";
    if (rc > 0) return strerror(rc);
    int i = -rc - 1001;
    if (i >= 0 && i < (int)(sizeof messages / sizeof *messages)) return messages[i];
    return "unknown error";
}

int plog_abi_version(void) { return PLOG_ABI_VERSION; }

#ifndef PLOG_VERSION_STRING
#define PLOG_VERSION_STRING "unknown"
#endif
const char *plog_version(void) { return PLOG_VERSION_STRING; }
