// LR schedules against values worked out by hand from the formulas in optim/schedule.h.
#include "train/config.h"
#include "optim/schedule.h"
#include "testing.h"

static Config base(ScheduleKind kind) {
    Config c;
    config_defaults(&c);
    c.optim.lr = 1.0;
    c.optim.final_lr_frac = 0.1;
    c.optim.warmup_steps = 4;
    c.optim.steps = 14;
    c.optim.lr_schedule = kind;
    c.optim.wsd_decay_frac = 0.5;
    return c;
}

static void expect(const Config *c, int step, double want) {
    double got = lr_at_step(&c->optim, step);
    CHECK(rel_err(got, want, 1e-15) < 1e-12, "schedule %d step %d: got %.15g want %.15g", c->optim.lr_schedule, step, got,
          want);
}

int main(void) {
    Config c = base(SCHED_COSINE);
    // warmup: (step + 1) / 4
    expect(&c, 0, 0.25);
    expect(&c, 1, 0.5);
    expect(&c, 3, 1.0);
    // cosine over 10 steps after warmup: p = (step - 4) / 10
    expect(&c, 4, 1.0);                        // p = 0
    expect(&c, 9, 0.1 + 0.9 * 0.5);            // p = 0.5: cos = 0 -> 0.55
    expect(&c, 14, 0.1);                       // p = 1 -> floor
    expect(&c, 6, 0.1 + 0.9 * 0.5 * (1 + 0.80901699437494745));  // p = 0.2, cos(0.2 pi)

    c = base(SCHED_LINEAR);
    expect(&c, 2, 0.75);
    expect(&c, 4, 1.0);
    expect(&c, 9, 0.55);                       // halfway
    expect(&c, 11, 1.0 - 0.9 * 0.7);           // p = 0.7 -> 0.37

    c = base(SCHED_CONSTANT);
    expect(&c, 0, 0.25);                       // warmup still applies
    expect(&c, 5, 1.0);
    expect(&c, 13, 1.0);

    c = base(SCHED_WSD);
    // decay starts at 14 - round(0.5 * 14) = 7; q = (step - 7) / 7
    expect(&c, 3, 1.0);
    expect(&c, 6, 1.0);
    expect(&c, 7, 1.0);                        // q = 0
    expect(&c, 14, 0.1);                       // q = 1
    expect(&c, 10, 0.1 + 0.9 * (1.0 - 0.65465367070797709));  // q = 3/7, sqrt = 0.6546...

    // no warmup: the first step runs at the peak
    c = base(SCHED_COSINE);
    c.optim.warmup_steps = 0;
    expect(&c, 0, 1.0);
    TEST_MAIN_END();
}
