#include "shardset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kill_point.h"
#include "base/util.h"

static char *join(const char *a, const char *b, const char *c) {
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = xmalloc(n);
    snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

static char *tmp_dir(const char *dir, const char *name) {
    char *d = join(dir, "/.", name), *s = join(d, ".prepare-tmp", "");
    free(d);
    return s;
}

static char *publish_dir(const char *dir, const char *name) {
    char *d = join(dir, "/.", name), *s = join(d, ".prepare-publish", "");
    free(d);
    return s;
}

// ---- the temporary folder: locked while a prepare writes it, removed if it dies ----

static char *g_tmp;   // the folder an error removes (until the commit)
static int g_lock = -1;

static void remove_tmp_on_error(void) {
    char *tmp = g_tmp;
    g_tmp = NULL;  // remove_tree may die itself
    if (!tmp) return;
    remove_tree(tmp);
    fprintf(stderr, "prepare: removed the unfinished output %s; the earlier shard set is unchanged\n", tmp);
}

// An exclusive flock on the folder, or -1 if another process holds it.
static int lock_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) die("%s: cannot open (%s)", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    close(fd);
    return -1;
}

int shardset_tmp_in_use(const char *tmp) {
    int fd = lock_dir(tmp);
    if (fd >= 0) close(fd);
    return fd < 0;
}

char *shardset_begin(const char *dir, const char *name, int quiet) {
    mkdir_p(dir);
    if (shardset_finish_publish(dir, name) && !quiet)
        fprintf(stderr, "prepare: finished publishing the shard set of an interrupted run of %s/%s\n", dir, name);
    char *tmp = tmp_dir(dir, name);
    if (dir_exists(tmp)) {
        if (shardset_tmp_in_use(tmp)) die("%s: another `hybrid prepare` is writing this shard set now", tmp);
        remove_tree(tmp);
        if (!quiet) fprintf(stderr, "prepare: removed %s, the unfinished output of an interrupted run\n", tmp);
    } else if (file_exists(tmp)) {
        die("%s: is in the way of prepare's temporary folder (remove it)", tmp);
    }
    if (mkdir(tmp, 0755) != 0) die("%s: cannot create folder (%s)", tmp, strerror(errno));
    g_lock = lock_dir(tmp);
    if (g_lock < 0) die("%s: another `hybrid prepare` is writing this shard set now", tmp);
    g_tmp = tmp;
    set_error_context("", remove_tmp_on_error);
    return xstrdup(tmp);
}

void shardset_commit(const char *dir, const char *name, const Manifest *m) {
    char *tmp = tmp_dir(dir, name), *pub = publish_dir(dir, name), *mpath = manifest_path(tmp, name);
    manifest_write(m, mpath);
    fsync_dir(tmp);
    if (rename(tmp, pub) != 0) die("%s: cannot rename to %s (%s)", tmp, pub, strerror(errno));
    fsync_dir(dir);
    set_error_context("", NULL);  // committed: from here on the publish is finished, never undone
    free(g_tmp);
    g_tmp = NULL;
    shardset_finish_publish(dir, name);
    close(g_lock);
    g_lock = -1;
    free(tmp), free(pub), free(mpath);
}

// ---- the publish: every step can run again, or in two processes at once ----

static void move(const char *from, const char *to) {
    if (rename(from, to) != 0 && errno != ENOENT) die("%s: cannot rename to %s (%s)", from, to, strerror(errno));
    kill_point("prepare-publish");
}

// Removes <dir>/<name>_{train,val}_NNNNNN.bin files that m does not list.
static void remove_stale(const char *dir, const char *name, const Manifest *m) {
    DIR *d = opendir(dir);
    if (!d) die("%s: cannot list (%s)", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        char *pdir, *pname, *psplit;
        if (!shard_name_parse(e->d_name, &pdir, &pname, &psplit)) continue;
        int stale = !strcmp(pname, name) && (!strcmp(psplit, "train") || !strcmp(psplit, "val")) &&
                    !manifest_find(m, e->d_name);
        free(pdir), free(pname), free(psplit);
        if (!stale) continue;
        char *path = join(dir, "/", e->d_name);
        if (unlink(path) != 0 && errno != ENOENT) die("%s: cannot remove the old shard (%s)", path, strerror(errno));
        free(path);
    }
    closedir(d);
}

int shardset_finish_publish(const char *dir, const char *name) {
    char *pub = publish_dir(dir, name);
    if (!dir_exists(pub)) {
        free(pub);
        return 0;
    }
    char *from = manifest_path(pub, name), *to = manifest_path(dir, name);
    Manifest m;
    if (manifest_read(&m, from)) {  // else the manifest moved already: only the folder is left
        for (int i = 0; i < m.n; i++) {
            char *a = join(pub, "/", m.e[i].file), *b = join(dir, "/", m.e[i].file);
            move(a, b);
            free(a), free(b);
        }
        remove_stale(dir, name, &m);
        fsync_dir(dir);
        move(from, to);
        manifest_free(&m);
    }
    fsync_dir(dir);
    if (rmdir(pub) != 0) {
        if (errno == ENOTEMPTY || errno == EEXIST) remove_tree(pub);  // the set has moved out: the rest is litter
        else if (errno != ENOENT) die("%s: cannot remove folder (%s)", pub, strerror(errno));
    }
    free(from), free(to), free(pub);
    return 1;
}
