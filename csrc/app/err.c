/* The error sentence of the application calls (mrc_last_error): what went
 * wrong and what to do, per thread, beside the -errno every call returns. */
#include <stdarg.h>
#include <stdio.h>

#include "app/app.h"

static __thread char last[512];

const char *mrc_last_error(void)
{
    return last;
}

void app_clear_error(void)
{
    last[0] = 0;
}

int app_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last, sizeof(last), fmt, ap);
    va_end(ap);
    return -err;
}
