#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "base/util.h"

void progress_start(Progress *p, const char *label, uint64_t total, int quiet) {
    p->label = label;
    p->total = total ? total : 1;
    p->start = p->last_draw = now_seconds();
    p->tty = isatty(2);
    p->last_decile = 0;
    p->quiet = quiet;
}

static void draw(Progress *p, uint64_t done, double now, int final) {
    double frac = (double)done / (double)p->total, secs = now - p->start;
    if (frac > 1) frac = 1;
    double rate = secs > 0 ? (double)done / secs : 0;
    double eta = rate > 0 ? (double)(p->total - (done < p->total ? done : p->total)) / rate : 0;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[30] = 0;
    int t = (int)(final ? secs : eta);
    fprintf(stderr, "%s%s [%s] %3.0f%%  %.1f/%.1f MB  %.1f MB/s  %s %d:%02d%s", p->tty ? "\r" : "", p->label, bar,
            100 * frac, done / 1e6, p->total / 1e6, rate / 1e6, final ? "took" : "ETA", t / 60, t % 60,
            final || !p->tty ? "\n" : "  ");
    fflush(stderr);
}

void progress_update(Progress *p, uint64_t done) {
    if (p->quiet) return;
    double now = now_seconds();
    if (p->tty) {
        if (now - p->last_draw < 0.1) return;
        p->last_draw = now;
        draw(p, done, now, 0);
        return;
    }
    int decile = (int)(10 * (double)done / (double)p->total);
    if (decile > p->last_decile && decile < 10) {
        p->last_decile = decile;
        draw(p, done, now, 0);
    }
}

void progress_finish(Progress *p, uint64_t done) {
    if (p->quiet) return;
    draw(p, done, now_seconds(), 1);
}
