// The JSONL metrics log (one object per line) and the human progress line.
#ifndef HYBRID_METRICS_H
#define HYBRID_METRICS_H

#include <stdio.h>

typedef struct {
    FILE *f;
    char path[600];
} MetricsLog;

// Opens out_dir/metrics.jsonl for appending. keep_through_step >= 0 (resume) first keeps the
// lines of steps <= keep_through_step and drops the rest, replacing the file atomically; the
// log is otherwise only ever appended to, and a failed write stops the run.
void metrics_open(MetricsLog *log, const char *out_dir, int keep_through_step);
// extra: more members for the line, already JSON ("\"key\": value, ..."), or NULL; they
// follow grad_norm (the MoE load statistics of a model with MoE)
void metrics_train(MetricsLog *log, int step, double loss, double lr, double grad_norm, const char *extra,
                   double tokens, double tok_per_s, double elapsed);
// extra: more members after val_loss, already JSON, or NULL (MQAR's accuracy)
void metrics_val(MetricsLog *log, int step, double val_loss, const char *extra);
void metrics_close(MetricsLog *log);

// "1h02m", "3m05s", "12s"
void format_duration(char *buf, size_t n, double seconds);

#endif
