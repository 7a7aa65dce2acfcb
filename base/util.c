#define _POSIX_C_SOURCE 200809L
#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char g_error_prefix[32];
static void (*g_abort_hook)(void);

void set_error_context(const char *prefix, void (*abort_hook)(void)) {
    snprintf(g_error_prefix, sizeof g_error_prefix, "%s", prefix ? prefix : "");
    g_abort_hook = abort_hook;
}

void die(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "hybrid: error: %s", g_error_prefix);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    if (g_abort_hook) g_abort_hook();  // distributed runs: take every rank down (dist/dist.c)
    exit(1);
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory allocating %zu bytes", n);
    return p;
}

void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) die("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) die("out of memory reallocating to %zu bytes", n);
    return q;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    memcpy(d, s, n);
    return d;
}

FILE *xfopen(const char *path, const char *mode) {
    FILE *f = fopen(path, mode);
    if (!f) die("%s: cannot open (%s)", path, strerror(errno));
    return f;
}

void xfread(void *buf, size_t size, size_t count, FILE *f, const char *path) {
    size_t got = fread(buf, size, count, f);
    if (got != count) {
        if (feof(f)) die("%s: file is truncated (wanted %zu more bytes)", path, (count - got) * size);
        die("%s: read error (%s)", path, strerror(errno));
    }
}

void xfwrite(const void *buf, size_t size, size_t count, FILE *f, const char *path) {
    if (fwrite(buf, size, count, f) != count) die("%s: write error (%s)", path, strerror(errno));
}

void xfclose(FILE *f, const char *path) {
    if (fclose(f) != 0) die("%s: error closing file (%s)", path, strerror(errno));
}

char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = xrealloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) die("%s: read error", path);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

void write_file_atomic(const char *path, const void *buf, size_t len) {
    size_t n = strlen(path) + 32;
    char *tmp = xmalloc(n);
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("%s: cannot create (%s)", tmp, strerror(errno));
    const char *p = buf;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            die("%s: write error (%s)", tmp, strerror(errno));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0) die("%s: fsync failed (%s)", tmp, strerror(errno));
    if (close(fd) != 0) die("%s: close failed (%s)", tmp, strerror(errno));
    if (rename(tmp, path) != 0) die("%s: cannot rename to %s (%s)", tmp, path, strerror(errno));
    free(tmp);
}

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void mkdir_p(const char *path) {
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) die("%s: cannot create folder (%s)", p, strerror(errno));
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) die("%s: cannot create folder (%s)", p, strerror(errno));
    if (!dir_exists(p)) die("%s: exists and is not a folder", p);
    free(p);
}

void remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (!d) {
        if (unlink(path) != 0 && errno != ENOENT) die("%s: cannot remove (%s)", path, strerror(errno));
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t n = strlen(path) + strlen(e->d_name) + 2;
        char *child = xmalloc(n);
        snprintf(child, n, "%s/%s", path, e->d_name);
        remove_tree(child);
        free(child);
    }
    closedir(d);
    if (rmdir(path) != 0) die("%s: cannot remove folder (%s)", path, strerror(errno));
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
