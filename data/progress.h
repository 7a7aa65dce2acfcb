// A progress line on stderr: bar, percent, bytes done of total, MB/s and ETA.
// On a terminal it redraws in place (at most 10 times a second); otherwise (a log
// file, CI) it prints a new line at every 10% step.
#ifndef HYBRID_PROGRESS_H
#define HYBRID_PROGRESS_H

#include <stdint.h>

typedef struct {
    const char *label;
    uint64_t total;
    double start, last_draw;
    int tty, last_decile, quiet;
} Progress;

void progress_start(Progress *p, const char *label, uint64_t total, int quiet);
void progress_update(Progress *p, uint64_t done);
void progress_finish(Progress *p, uint64_t done);  // final line, with a newline

#endif
