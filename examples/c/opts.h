/* Numbers from the command line for the examples: the whole argument read, its range checked, and a
 * wrong one named in one line (the option, what it wants, what was given). */
#ifndef MRC_EXAMPLE_OPTS_H
#define MRC_EXAMPLE_OPTS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* *out = TEXT read as a number from LO to HI; 0, or -1 after a line on stderr naming OPT. */
static inline int opt_number(const char *prog, const char *opt, const char *text, unsigned long lo, unsigned long hi,
                             unsigned long *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(text, &end, 0);
    int bad = !*text || *end || errno || text[0] == '-' || v < lo || v > hi;
    if (bad) {
        fprintf(stderr, "%s: %s wants a number from %lu to %lu, not '%s' (--help lists the options)\n", prog, opt,
                lo, hi, text);
        return -1;
    }
    *out = v;
    return 0;
}

#endif
