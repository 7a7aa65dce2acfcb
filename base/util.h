// Small helpers shared by every part of hybrid.c: fatal errors, checked allocation
// and checked file I/O. Every error names the file (or the thing) and the problem.
#ifndef HYBRID_UTIL_H
#define HYBRID_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// Print "hybrid: error: <message>" to stderr and exit(1).
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
// Distributed runs: a prefix for every error ("[rank 3] ") and a hook die() calls before
// exiting (MPI_Abort, so the other ranks stop instead of waiting). NULL: none.
void set_error_context(const char *prefix, void (*abort_hook)(void));

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

// Opens a file for reading (errno set and -1 if it cannot be opened). Anything but a
// regular file (a FIFO, a device, a folder, a socket) is refused at once with a message:
// reading it could block or never end. xfopen (reading modes) and read_file use it.
int open_regular(const char *path);

FILE *xfopen(const char *path, const char *mode);  // dies if it cannot open; "r": open_regular
void xfread(void *buf, size_t size, size_t count, FILE *f, const char *path);
void xfwrite(const void *buf, size_t size, size_t count, FILE *f, const char *path);
void xfclose(FILE *f, const char *path);

// Reads a whole regular file into a NUL-terminated buffer; *len gets its size (may be
// NULL). Returns NULL (and sets errno) if the file cannot be opened.
char *read_file(const char *path, size_t *len);

// Writes a file atomically: a temporary in the same folder, fsync, rename over `path`.
// Any failure (a full disk on write, fsync or close) removes the temporary and dies
// naming `path` and the error.
typedef struct {
    int fd;
    char *path, *tmp;
} AtomicFile;
void atomic_open(AtomicFile *f, const char *path);
void atomic_write(AtomicFile *f, const void *buf, size_t len);
void atomic_commit(AtomicFile *f);
void write_file_atomic(const char *path, const void *buf, size_t len);  // the three at once
void fsync_dir(const char *path);  // makes renames in a folder durable (best effort)

int file_exists(const char *path);
int dir_exists(const char *path);
void mkdir_p(const char *path);      // like `mkdir -p`, dies on failure
void remove_tree(const char *path);  // like `rm -rf` (links removed, not followed), for our own folders

double now_seconds(void);            // monotonic clock

#endif
