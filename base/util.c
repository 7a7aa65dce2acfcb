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

#include "base/kill_point.h"

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

// What a non-regular file is, for the messages of open_regular.
static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a folder";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

int open_regular(const char *path) {
    // O_NONBLOCK: opening a FIFO without a writer would wait for one
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) die("%s: cannot stat (%s)", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        die("%s: is %s, not a regular file: refusing to read it", path, file_kind(st.st_mode));
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) die("%s: fcntl failed (%s)", path, strerror(errno));
    return fd;
}

FILE *xfopen(const char *path, const char *mode) {
    FILE *f;
    if (mode[0] == 'r' && !strchr(mode, '+')) {  // reading: a regular file only
        int fd = open_regular(path);
        f = fd < 0 ? NULL : fdopen(fd, mode);
        if (fd >= 0 && !f) close(fd);
    } else {
        f = fopen(path, mode);
    }
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
    int fd = open_regular(path);
    if (fd < 0) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = xrealloc(buf, cap *= 2);
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) die("%s: read error (%s)", path, strerror(errno));
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

// The temporary is removed on every failure, so a full disk leaves nothing behind.
static void atomic_fail(AtomicFile *f, const char *what) {
    int e = errno;
    if (f->fd >= 0) close(f->fd);
    unlink(f->tmp);
    die("%s: %s (%s); the temporary file %s was removed", f->path, what, strerror(e), f->tmp);
}

void atomic_open(AtomicFile *f, const char *path) {
    size_t n = strlen(path) + 32;
    f->path = xstrdup(path);
    f->tmp = xmalloc(n);
    snprintf(f->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) atomic_fail(f, "cannot create the temporary file");
}

void atomic_write(AtomicFile *f, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(f->fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) atomic_fail(f, "write error");
        p += w;
        len -= (size_t)w;
    }
}

void atomic_commit(AtomicFile *f) {
    if (fsync(f->fd) != 0) atomic_fail(f, "fsync failed");
    kill_point("atomic-replace");
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0) atomic_fail(f, "close failed");
    if (rename(f->tmp, f->path) != 0) atomic_fail(f, "cannot rename the temporary file into place");
    free(f->tmp), free(f->path);
    f->tmp = f->path = NULL;
}

void write_file_atomic(const char *path, const void *buf, size_t len) {
    AtomicFile f;
    atomic_open(&f, path);
    atomic_write(&f, buf, len);
    atomic_commit(&f);
}

void fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);  // best effort: some filesystems refuse fsync on folders
    close(fd);
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

// A link is removed, never followed (as `rm -rf` does): following a link to a folder
// elsewhere would delete files outside the tree, and a link to the tree itself would
// recurse until the path is too long.
void remove_tree(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
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
