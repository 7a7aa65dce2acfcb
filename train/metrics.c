#include "metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"

// Every line is appended and flushed at once; a failed write (a full disk) stops the run
// with the file and the reason instead of dropping lines.
static void checked_flush(MetricsLog *log, int printed) {
    if (printed < 0 || fflush(log->f) != 0 || ferror(log->f))
        die("%s: cannot write the metrics log (%s); the run stops here (its last checkpoint is intact)", log->path,
            strerror(errno ? errno : EIO));
}

void metrics_open(MetricsLog *log, const char *out_dir, int keep_through_step) {
    snprintf(log->path, sizeof log->path, "%s/metrics.jsonl", out_dir);
    if (keep_through_step >= 0) {  // resume: the lines through the checkpoint's step, replaced atomically
        size_t len;
        char *text = read_file(log->path, &len);
        if (text) {
            char *kept = xmalloc(len + 1);
            size_t kept_len = 0;
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
            write_file_atomic(log->path, kept, kept_len);
            free(kept);
            free(text);
        }
    }
    // only ever appended to from here on (a new run starts in an out_dir without a log:
    // train refuses another run's out_dir unless told to resume or to overwrite)
    struct stat st;  // a FIFO or a device here would block or swallow the log
    if (stat(log->path, &st) == 0 && !S_ISREG(st.st_mode))
        die("%s: exists and is not a regular file (a FIFO, device or folder): cannot keep the metrics log there",
            log->path);
    log->f = xfopen(log->path, "a");
}

void metrics_train(MetricsLog *log, int step, double loss, double lr, double grad_norm, const char *extra,
                   double tokens, double tok_per_s, double elapsed) {
    errno = 0;
    int n = fprintf(log->f,
                    "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, %s%s\"tokens\": %.0f, "
                    "\"tok_per_s\": %.1f, \"elapsed_s\": %.3f}\n",
                    step, loss, lr, grad_norm, extra ? extra : "", extra && *extra ? ", " : "", tokens, tok_per_s,
                    elapsed);
    checked_flush(log, n);
}

void metrics_val(MetricsLog *log, int step, double val_loss, const char *extra) {
    errno = 0;
    int n = fprintf(log->f, "{\"step\": %d, \"val_loss\": %.9g%s%s}\n", step, val_loss, extra && *extra ? ", " : "",
                    extra ? extra : "");
    checked_flush(log, n);
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
