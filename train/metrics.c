#include "metrics.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void metrics_open(MetricsLog *log, const char *out_dir, int keep_through_step) {
    snprintf(log->path, sizeof log->path, "%s/metrics.jsonl", out_dir);
    char *kept = NULL;
    size_t kept_len = 0;
    if (keep_through_step >= 0) {
        size_t len;
        char *text = read_file(log->path, &len);
        if (text) {
            kept = xmalloc(len + 1);
            for (char *line = text; *line;) {
                char *next = strchr(line, '\n');
                size_t n = next ? (size_t)(next - line + 1) : strlen(line);
                const char *s = strstr(line, "\"step\": ");
                if (s && s < line + n && atoi(s + 8) <= keep_through_step) {
                    memcpy(kept + kept_len, line, n);
                    kept_len += n;
                }
                line += n;
            }
            free(text);
        }
    }
    log->f = xfopen(log->path, "w");
    if (kept_len) xfwrite(kept, 1, kept_len, log->f, log->path);
    free(kept);
    fflush(log->f);
}

void metrics_train(MetricsLog *log, int step, double loss, double lr, double grad_norm, const char *extra,
                   double tokens, double tok_per_s, double elapsed) {
    fprintf(log->f,
            "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, %s%s\"tokens\": %.0f, "
            "\"tok_per_s\": %.1f, \"elapsed_s\": %.3f}\n",
            step, loss, lr, grad_norm, extra ? extra : "", extra && *extra ? ", " : "", tokens, tok_per_s, elapsed);
    fflush(log->f);
}

void metrics_val(MetricsLog *log, int step, double val_loss) {
    fprintf(log->f, "{\"step\": %d, \"val_loss\": %.9g}\n", step, val_loss);
    fflush(log->f);
}

void metrics_close(MetricsLog *log) {
    if (log->f) xfclose(log->f, log->path);
    log->f = NULL;
}

void format_duration(char *buf, size_t n, double s) {
    if (s < 0 || s > 1e8) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}
