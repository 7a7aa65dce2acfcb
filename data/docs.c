#include "docs.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/brown.h"
#include "data/jsonl.h"
#include "base/util.h"

const char *docs_format_name(DocFormat f) {
    static const char *names[] = {"auto", "text", "jsonl", "brown"};
    return names[f];
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void add_file(DocReader *r, size_t *cap, const char *path, DocFormat format, uint64_t size) {
    if (r->nfiles == *cap) r->files = xrealloc(r->files, (*cap = *cap ? 2 * *cap : 64) * sizeof(InputFile));
    if (format == FORMAT_AUTO) format = ends_with(path, ".jsonl") ? FORMAT_JSONL : FORMAT_TEXT;
    r->files[r->nfiles++] = (InputFile){xstrdup(path), format, size};
    r->total_bytes += size;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void walk(DocReader *r, size_t *cap, const char *path, DocFormat format, int top) {
    struct stat st;
    if (stat(path, &st) != 0) die("prepare: %s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))  // a FIFO or a device could block or never end
        die("prepare: %s: neither a regular file nor a folder (a FIFO, device or socket): refusing to read it", path);
    if (!S_ISDIR(st.st_mode)) {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (top || format != FORMAT_BROWN || brown_is_sample_name(base))
            add_file(r, cap, path, format, (uint64_t)st.st_size);
        return;
    }
    DIR *d = opendir(path);
    if (!d) die("prepare: %s: cannot read folder (%s)", path, strerror(errno));
    char **names = NULL;
    size_t n = 0, ncap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;  // ".", ".." and hidden files
        if (n == ncap) names = xrealloc(names, (ncap = ncap ? 2 * ncap : 64) * sizeof(char *));
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (n > 1) qsort(names, n, sizeof(char *), cmp_names);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(path) + strlen(names[i]) + 2;
        char *child = xmalloc(len);
        snprintf(child, len, "%s/%s", path, names[i]);
        walk(r, cap, child, format, 0);
        free(child);
        free(names[i]);
    }
    free(names);
}

void docs_open(DocReader *r, char **paths, int npaths, DocFormat format) {
    memset(r, 0, sizeof(*r));
    size_t cap = 0;
    for (int i = 0; i < npaths; i++) {
        size_t before = r->nfiles;
        walk(r, &cap, paths[i], format, 1);
        if (r->nfiles == before)
            die("prepare: %s: no input files in this folder%s", paths[i],
                format == FORMAT_BROWN ? " (with --format brown, files named like ca01)" : "");
    }
}

void docs_rewind(DocReader *r) {
    if (r->jsonl) fclose(r->jsonl);
    r->jsonl = NULL;
    r->file = 0;
    r->line = 0;
    r->pending = 0;
}

void docs_close(DocReader *r) {
    docs_rewind(r);
    for (size_t i = 0; i < r->nfiles; i++) free(r->files[i].path);
    free(r->files);
    free(r->linebuf);
    memset(r, 0, sizeof(*r));
}

// The next non-empty "text" of the current JSONL file; 0 at its end.
static int next_jsonl(DocReader *r, Doc *d) {
    const InputFile *f = &r->files[r->file];
    if (!r->jsonl) {
        int fd = open_regular(f->path);
        r->jsonl = fd < 0 ? NULL : fdopen(fd, "rb");
        if (!r->jsonl) die("prepare: %s: cannot open (%s)", f->path, strerror(errno));
    }
    ssize_t n;
    while ((n = getline(&r->linebuf, &r->linecap, r->jsonl)) > 0) {
        r->line++;
        r->pending += (uint64_t)n;
        size_t len = (size_t)n;
        while (len > 0 && (r->linebuf[len - 1] == '\n' || r->linebuf[len - 1] == '\r')) len--;
        size_t blank = 0;
        while (blank < len && (r->linebuf[blank] == ' ' || r->linebuf[blank] == '\t')) blank++;
        if (blank == len) continue;
        size_t col;
        d->text.len = 0;
        const char *err = jsonl_text(r->linebuf, len, &d->text, &col);
        if (err) die("prepare: %s:%zu:%zu: %s", f->path, r->line, col, err);
        if (d->text.len == 0) continue;
        d->path = f->path;
        d->line = r->line;
        return 1;
    }
    if (ferror(r->jsonl)) die("prepare: %s: read error (%s)", f->path, strerror(errno));
    fclose(r->jsonl);
    r->jsonl = NULL;
    return 0;
}

// The current file as one document, once (r->line marks it read); 0 after that.
static int next_whole_file(DocReader *r, Doc *d) {
    const InputFile *f = &r->files[r->file];
    if (r->line++ > 0) return 0;
    r->pending += f->size;
    if (f->size == 0) return 0;
    size_t len;
    char *data = read_file(f->path, &len);
    if (!data) die("prepare: %s: cannot open (%s)", f->path, strerror(errno));
    d->text.len = 0;
    if (f->format == FORMAT_BROWN) brown_to_text(data, len, &d->text);
    else buf_append(&d->text, data, len);
    free(data);
    d->path = f->path;
    d->line = 0;
    return 1;
}

int docs_next(DocReader *r, Doc *d) {
    while (r->file < r->nfiles) {
        int got = r->files[r->file].format == FORMAT_JSONL ? next_jsonl(r, d) : next_whole_file(r, d);
        if (got) {
            d->bytes = r->pending;
            return 1;
        }
        r->file++;
        r->line = 0;
    }
    return 0;
}

uint64_t docs_count(DocReader *r) {
    docs_rewind(r);
    Doc d = {0};
    uint64_t n = 0;
    for (; r->file < r->nfiles; r->file++, r->line = 0) {
        if (r->files[r->file].format != FORMAT_JSONL) n += r->files[r->file].size > 0;  // no need to read it
        else
            while (next_jsonl(r, &d)) n++;
    }
    buf_free(&d.text);
    docs_rewind(r);
    return n;
}
