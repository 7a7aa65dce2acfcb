// The distributed runtime: MPI start-up, groups, failure behaviour, host collectives
// (dist.h). Without HAVE_MPI (no Open MPI at build time) only a world of one exists.
#define _POSIX_C_SOURCE 200809L
#include "dist.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

#ifdef HAVE_MPI
#include <mpi.h>
#endif

Dist g_dist = {0, 1, 0, 1, 1, 0, 0, NULL, NULL, NULL};

int dist_mpi_available(void) {
#ifdef HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

int dist_is_root(void) { return g_dist.rank == 0; }

// Was this process started by a launcher (mpirun, srun)? Then it must join the world.
static int launched_by_mpi(void) {
    const char *keys[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (getenv(keys[i])) return 1;
    return 0;
}

#ifdef HAVE_MPI
#define MPI_CHECK(call)                                                                    \
    do {                                                                                   \
        int mpi_rc_ = (call);                                                              \
        if (mpi_rc_ != MPI_SUCCESS) {                                                      \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                           \
            int mpi_len_ = 0;                                                              \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                                \
            die("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, mpi_msg_);              \
        }                                                                                  \
    } while (0)

static MPI_Comm world_comm(void) { return g_dist.world_comm ? *(MPI_Comm *)g_dist.world_comm : MPI_COMM_WORLD; }

static void abort_all(void) { MPI_Abort(MPI_COMM_WORLD, 1); }

// ---- watchdog: a blocking wait longer than the timeout aborts the job ----
static pthread_mutex_t g_wait_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *g_wait_what;   // the collective being waited on, NULL when none
static double g_wait_since;
static double g_timeout = 600;

void dist_wait_begin(const char *what) {
    pthread_mutex_lock(&g_wait_lock);
    g_wait_what = what;
    g_wait_since = now_seconds();
    pthread_mutex_unlock(&g_wait_lock);
}

void dist_wait_end(void) {
    pthread_mutex_lock(&g_wait_lock);
    g_wait_what = NULL;
    pthread_mutex_unlock(&g_wait_lock);
}

static void *watchdog(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g_wait_lock);
        const char *what = g_wait_what;
        double waited = what ? now_seconds() - g_wait_since : 0;
        pthread_mutex_unlock(&g_wait_lock);
        if (what && waited > g_timeout) {
            fprintf(stderr,
                    "hybrid: error: [rank %d] waited %.0f s in %s: another rank has died or hangs; aborting every rank "
                    "(HYBRID_DIST_TIMEOUT sets the limit)\n",
                    g_dist.rank, waited, what);
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    return NULL;
}
#else
void dist_wait_begin(const char *what) { (void)what; }
void dist_wait_end(void) {}
#endif

void dist_init(int *argc, char ***argv) {
    if (!launched_by_mpi() && !getenv("HYBRID_MPI")) return;  // a world of one, no MPI at all
#ifdef HAVE_MPI
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    g_dist.mpi = 1;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_dist.rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_dist.world));
    MPI_Comm *wc = xmalloc(sizeof *wc), local;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, wc));
    g_dist.world_comm = wc;
    MPI_CHECK(MPI_Comm_split_type(*wc, MPI_COMM_TYPE_SHARED, g_dist.rank, MPI_INFO_NULL, &local));
    MPI_CHECK(MPI_Comm_rank(local, &g_dist.local_rank));
    MPI_CHECK(MPI_Comm_size(local, &g_dist.local_world));
    MPI_CHECK(MPI_Comm_free(&local));
    // errors come back as codes (MPI_CHECK names the call) instead of MPI's own abort
    MPI_CHECK(MPI_Comm_set_errhandler(*wc, MPI_ERRORS_RETURN));
    if (g_dist.world > 1) {
        static char prefix[32];
        snprintf(prefix, sizeof prefix, "[rank %d] ", g_dist.rank);
        set_error_context(prefix, abort_all);
        const char *t = getenv("HYBRID_DIST_TIMEOUT");
        if (t && atof(t) > 0) g_timeout = atof(t);
        pthread_t th;
        if (pthread_create(&th, NULL, watchdog, NULL) != 0) die("cannot start the collective watchdog thread");
        pthread_detach(th);
    }
    dist_set_ep(1);
#else
    (void)argc;
    (void)argv;
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n) n = getenv("PMI_SIZE");
    if (n && atoi(n) > 1)
        die("this hybrid was built without MPI (Open MPI was not found at build time: Debian `apt install "
            "libopenmpi-dev openmpi-bin`, then rebuild) but was launched as one of %s ranks",
            n);
#endif
}

void dist_set_ep(int ep_size) {
    if (ep_size < 1 || g_dist.world % ep_size)
        die("expert_parallel = %d must divide the number of ranks (%d)", ep_size, g_dist.world);
    g_dist.ep_size = ep_size;
    g_dist.ep_rank = g_dist.rank % ep_size;
#ifdef HAVE_MPI
    if (!g_dist.mpi) return;
    if (!g_dist.ep_comm) g_dist.ep_comm = xmalloc(sizeof(MPI_Comm));
    else MPI_CHECK(MPI_Comm_free((MPI_Comm *)g_dist.ep_comm));
    // consecutive ranks form a group: rank = group * ep_size + ep_rank
    MPI_CHECK(MPI_Comm_split(world_comm(), g_dist.rank / ep_size, g_dist.ep_rank, (MPI_Comm *)g_dist.ep_comm));
    // the same experts: EP rank ep_rank of every group, in group order
    if (!g_dist.ep_dp_comm) g_dist.ep_dp_comm = xmalloc(sizeof(MPI_Comm));
    else MPI_CHECK(MPI_Comm_free((MPI_Comm *)g_dist.ep_dp_comm));
    MPI_CHECK(MPI_Comm_split(world_comm(), g_dist.ep_rank, g_dist.rank / ep_size, (MPI_Comm *)g_dist.ep_dp_comm));
#endif
}

void dist_finalize(void) {
#ifdef HAVE_MPI
    if (!g_dist.mpi) return;
    dist_barrier("the final barrier");
    set_error_context(NULL, NULL);
    MPI_Finalize();
    g_dist.mpi = 0;
#endif
}

#ifdef HAVE_MPI
// MPI counts are int: large buffers go in pieces.
#define MPI_PIECE ((size_t)1 << 30)
#endif

void dist_barrier(const char *what) {
#ifdef HAVE_MPI
    if (!g_dist.mpi || g_dist.world == 1) return;
    dist_wait_begin(what);
    MPI_CHECK(MPI_Barrier(world_comm()));
    dist_wait_end();
#else
    (void)what;
#endif
}

void dist_allreduce_sum_double(double *v, size_t n) {
#ifdef HAVE_MPI
    if (!g_dist.mpi || g_dist.world == 1) return;
    dist_wait_begin("an allreduce of scalars");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, world_comm()));
    dist_wait_end();
#else
    (void)v;
    (void)n;
#endif
}

void dist_allreduce_sum_double_ep(double *v, size_t n) {
#ifdef HAVE_MPI
    if (!g_dist.mpi || g_dist.ep_size == 1) return;
    dist_wait_begin("an allreduce of scalars over the expert-parallel group");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, *(MPI_Comm *)g_dist.ep_comm));
    dist_wait_end();
#else
    (void)v;
    (void)n;
#endif
}

void dist_allreduce_max_int(int *v, size_t n) {
#ifdef HAVE_MPI
    if (!g_dist.mpi || g_dist.world == 1) return;
    dist_wait_begin("an allreduce of flags");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_INT, MPI_MAX, world_comm()));
    dist_wait_end();
#else
    (void)v;
    (void)n;
#endif
}

void dist_bcast_bytes(void *buf, size_t bytes, int root) {
#ifdef HAVE_MPI
    if (!g_dist.mpi || g_dist.world == 1) return;
    dist_wait_begin("a broadcast");
    for (size_t off = 0; off < bytes; off += MPI_PIECE) {
        size_t len = bytes - off < MPI_PIECE ? bytes - off : MPI_PIECE;
        MPI_CHECK(MPI_Bcast((char *)buf + off, (int)len, MPI_BYTE, root, world_comm()));
    }
    dist_wait_end();
#else
    (void)buf;
    (void)bytes;
    (void)root;
#endif
}

void dist_reduce_sum_float_to_root(float *buf, size_t n) {
#ifdef HAVE_MPI
    if (!g_dist.mpi || g_dist.world == 1) return;
    dist_wait_begin("a checkpoint gather");
    for (size_t off = 0; off < n; off += MPI_PIECE / 4) {
        size_t len = n - off < MPI_PIECE / 4 ? n - off : MPI_PIECE / 4;
        void *send = g_dist.rank == 0 ? MPI_IN_PLACE : (void *)(buf + off);
        MPI_CHECK(MPI_Reduce(send, buf + off, (int)len, MPI_FLOAT, MPI_SUM, 0, world_comm()));
    }
    dist_wait_end();
#else
    (void)buf;
    (void)n;
#endif
}

void dist_allgather_bytes(const void *in, void *out, size_t bytes) {
#ifdef HAVE_MPI
    if (g_dist.mpi && g_dist.world > 1) {
        dist_wait_begin("an allgather");
        MPI_CHECK(MPI_Allgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, world_comm()));
        dist_wait_end();
        return;
    }
#endif
    memcpy(out, in, bytes);
}

// The first line where a and b differ (1-based), its text in a and in b (truncated).
static int first_difference(const char *a, const char *b, char *la, char *lb, size_t cap) {
    int line = 1;
    for (;;) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        size_t na = ea ? (size_t)(ea - a) : strlen(a), nb = eb ? (size_t)(eb - b) : strlen(b);
        if (na != nb || memcmp(a, b, na)) {
            snprintf(la, cap, "%.*s", (int)(na < cap - 1 ? na : cap - 1), a);
            snprintf(lb, cap, "%.*s", (int)(nb < cap - 1 ? nb : cap - 1), b);
            if (!*la) snprintf(la, cap, "(nothing)");
            if (!*lb) snprintf(lb, cap, "(nothing)");
            return line;
        }
        if (!ea || !eb) return 0;
        a = ea + 1;
        b = eb + 1;
        line++;
    }
}

void dist_check_same(const char *what, const char *text) {
    if (g_dist.world == 1) return;
    // rank 0's text to everyone; each rank compares; then every rank learns the first
    // rank that differs (a flag allreduce) and reports it, so every rank fails clearly
    size_t len = strlen(text) + 1;
    dist_bcast_bytes(&len, sizeof len, 0);
    char *root = xmalloc(len);
    if (g_dist.rank == 0) memcpy(root, text, len);
    dist_bcast_bytes(root, len, 0);
    char mine[160] = "", theirs[160] = "";
    int line = strcmp(root, text) ? first_difference(root, text, theirs, mine, sizeof mine) : 0;
    if (strcmp(root, text) && !line) line = 1;
    int *lines = xcalloc((size_t)g_dist.world, sizeof(int));
    dist_allgather_bytes(&line, lines, sizeof(int));
    int bad = -1;
    for (int r = 0; r < g_dist.world && bad < 0; r++)
        if (lines[r]) bad = r;
    free(root);
    free(lines);
    if (bad < 0) return;
    set_error_context(NULL, NULL);  // every rank reports and exits on its own
    if (g_dist.rank == bad)
        fprintf(stderr, "hybrid: error: [rank %d] %s differs from rank 0's at line %d: rank 0 has '%s', rank %d has '%s'\n",
                g_dist.rank, what, line, theirs, g_dist.rank, mine);
    else
        fprintf(stderr, "hybrid: error: [rank %d] %s differs between ranks (rank %d differs from rank 0; see its message)\n",
                g_dist.rank, what, bad);
    fflush(stderr);
    dist_barrier("the mismatch report");
#ifdef HAVE_MPI
    if (g_dist.mpi) MPI_Finalize();
#endif
    exit(1);
}
