/*
 * Threads of require blocks, with the preload shim: what a block passes to
 * the threads created in it and theirs (ForDescendants), and what a thread
 * blocked in a wait gives back (release on block). Run by
 * tests/c_require.rs, one scenario per process (`require_threads MODE`),
 * always with the shim preloaded; built with -fopenmp too, for the idle
 * OpenMP team (`omp_idle`). Prints "ok MODE" on success; a failed
 * check prints the line and exits 1.
 */
#define _GNU_SOURCE
#include <allot.h>
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "require_util.h"

static int g_cpus[CPU_SETSIZE];
static int g_ncpus;

/* ---- ForDescendants: grandchildren receive the allocation -------------- */

/* Generations below the block's thread: child, grandchild, great-
 * grandchild. What each saw: how many CPUs it may use, and whether CPU
 * `g_want` is the only one. */
#define GENERATIONS 3
static int g_want;
static int g_seen_n[GENERATIONS], g_seen_only[GENERATIONS];

static void *generation(void *arg)
{
    long depth = (long)arg;
    int mine[CPU_SETSIZE];
    g_seen_n[depth] = affinity(mine, CPU_SETSIZE);
    g_seen_only[depth] = g_seen_n[depth] == 1 && mine[0] == g_want;
    if (depth + 1 < GENERATIONS) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, generation, (void *)(depth + 1)) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
    return NULL;
}

/* The block's thread asks, for every descendant, CPU `g_want` (1.0) and no
 * other (0): its child, grandchild and great-grandchild each make the
 * request when they start and run on that CPU alone, while the block's own
 * thread keeps every CPU (the requests are the descendants'). */
static void descendants(void)
{
    CHECK(g_ncpus >= 2);
    g_want = g_cpus[g_ncpus - 1];
    allot_req_t reqs[CPU_SETSIZE];
    for (int i = 0; i < g_ncpus; i++)
        reqs[i] = allot_for_descendants(
            allot_shared(allot_cpu((uint32_t)g_cpus[i], g_cpus[i] == g_want ? 1.0 : 0.0)));
    static allot_site_t site = ALLOT_SITE_INIT;
    allot_scope_t s = ALLOT_SCOPE_INIT;
    CHECK(allot_require_enter(&s, &site, reqs, (size_t)g_ncpus, 0) == ALLOT_OK);
    int mine[CPU_SETSIZE];
    CHECK(affinity(mine, CPU_SETSIZE) == g_ncpus);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, generation, (void *)0L) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    allot_require_leave(&s);
    for (int d = 0; d < GENERATIONS; d++) {
        printf("generation %d: %d CPU(s), only cpu %d: %s\n", d + 1, g_seen_n[d], g_want,
               g_seen_only[d] ? "yes" : "no");
        CHECK(g_seen_only[d]);
    }
    CHECK(affinity(mine, CPU_SETSIZE) == g_ncpus);
}

/* ---- release on block: waits other than joins ---------------------------- */

/* Enters a block holding CPU g_cpus[0] alone (the others at 0). */
static void one_cpu_block(allot_scope_t *s)
{
    allot_req_t reqs[CPU_SETSIZE];
    for (int i = 0; i < g_ncpus; i++)
        reqs[i] = allot_cpu((uint32_t)g_cpus[i], i == 0 ? 1.0 : 0.0);
    static allot_site_t site = ALLOT_SITE_INIT;
    CHECK(allot_require_enter(s, &site, reqs, (size_t)g_ncpus, 0) == ALLOT_OK);
}

/* A block of one CPU whose thread waits for a thread it created, which
 * needs a core of the block: the wait must give the CPU back, or neither
 * ever runs (alarm() turns that into a failure). One way of waiting per
 * round: a semaphore, a pipe read, an accept, a raw futex wait. */
enum way { W_SEM, W_READ, W_ACCEPT, W_FUTEX, W_COUNT };
static const char *const way_name[W_COUNT] = {"sem_wait", "read", "accept", "futex"};
static sem_t g_sem;
static int g_pipe[2];
static char g_sock_path[108];
static int g_futex;

static void *signaller(void *arg)
{
    enum way w = (enum way)(long)arg;
    allot_outcome_t o;
    allot_require(&o, allot_cores(1)) { /* needs the block's one CPU */
        CHECK(o.ncores == 1);
        if (w == W_SEM) {
            CHECK(sem_post(&g_sem) == 0);
        } else if (w == W_READ) {
            CHECK(write(g_pipe[1], "x", 1) == 1);
        } else if (w == W_ACCEPT) {
            int c = socket(AF_UNIX, SOCK_STREAM, 0);
            struct sockaddr_un a = {.sun_family = AF_UNIX};
            memcpy(a.sun_path, g_sock_path, sizeof g_sock_path);
            CHECK(connect(c, (struct sockaddr *)&a, sizeof a) == 0);
            close(c);
        } else {
            __atomic_store_n(&g_futex, 1, __ATOMIC_RELEASE);
            syscall(SYS_futex, &g_futex, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        }
    }
    return NULL;
}

static void wait_one_way(enum way w)
{
    int listener = -1;
    if (w == W_SEM)
        CHECK(sem_init(&g_sem, 0, 0) == 0);
    if (w == W_READ)
        CHECK(pipe(g_pipe) == 0);
    if (w == W_ACCEPT) {
        snprintf(g_sock_path, sizeof g_sock_path, "/tmp/allot-require-%d.sock", (int)getpid());
        unlink(g_sock_path);
        listener = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        memcpy(a.sun_path, g_sock_path, sizeof g_sock_path);
        CHECK(bind(listener, (struct sockaddr *)&a, sizeof a) == 0);
        CHECK(listen(listener, 1) == 0);
    }
    g_futex = 0;
    /* I/O waits keep the allocation unless the thread says otherwise. */
    uint32_t before_choice = 0;
    if (w == W_READ || w == W_ACCEPT)
        CHECK(allot_release_on(ALLOT_WAIT_SYNC | ALLOT_WAIT_IO, &before_choice) == ALLOT_OK);
    allot_scope_t s = ALLOT_SCOPE_INIT;
    one_cpu_block(&s);
    uint64_t given = allot_given_back();
    pthread_t t;
    alarm(20); /* a wait that keeps its CPU never ends */
    CHECK(pthread_create(&t, NULL, signaller, (void *)(long)w) == 0);
    if (w == W_SEM) {
        CHECK(sem_wait(&g_sem) == 0);
    } else if (w == W_READ) {
        char c;
        CHECK(read(g_pipe[0], &c, 1) == 1);
    } else if (w == W_ACCEPT) {
        int c = accept(listener, NULL, NULL);
        CHECK(c >= 0);
        close(c);
    } else {
        while (__atomic_load_n(&g_futex, __ATOMIC_ACQUIRE) == 0)
            syscall(SYS_futex, &g_futex, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    }
    CHECK(pthread_join(t, NULL) == 0);
    alarm(0);
    CHECK(allot_given_back() > given); /* the program can know */
    int mine[CPU_SETSIZE];
    CHECK(affinity(mine, CPU_SETSIZE) == 1 && mine[0] == g_cpus[0]); /* retaken */
    allot_require_leave(&s);
    if (w == W_READ || w == W_ACCEPT)
        CHECK(allot_release_on(before_choice, NULL) == ALLOT_OK);
    if (listener >= 0) {
        close(listener);
        unlink(g_sock_path);
    }
    if (w == W_READ) {
        close(g_pipe[0]);
        close(g_pipe[1]);
    }
    printf("%s gave the CPU back\n", way_name[w]);
}

static void block_waits(void)
{
    for (int w = 0; w < W_COUNT; w++)
        wait_one_way((enum way)w);
}

/* ---- which waits give back: the paper's rule by default ---------------- */

static int g_in;           /* a child got into its block */
static int g_locked;       /* the child holds g_mutex */
static sem_t g_go;         /* the writer may write */
static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static int g_io[2];

/* A thread created in the block that needs its one CPU. */
static void *enter_one(void *arg)
{
    int locks = arg != NULL;
    if (locks) {
        CHECK(pthread_mutex_lock(&g_mutex) == 0);
        __atomic_store_n(&g_locked, 1, __ATOMIC_RELEASE);
    }
    allot_outcome_t o;
    allot_require(&o, allot_cores(1)) {
        __atomic_store_n(&g_in, 1, __ATOMIC_RELEASE);
    }
    if (locks)
        CHECK(pthread_mutex_unlock(&g_mutex) == 0);
    return NULL;
}

/* A thread outside every block: writes the pipe once told to. */
static void *writer(void *arg)
{
    (void)arg;
    CHECK(sem_wait(&g_go) == 0);
    CHECK(write(g_io[1], "x", 1) == 1);
    return NULL;
}

static void wait_kinds(void)
{
    pthread_t t;
    allot_scope_t s;
    uint64_t given;
    alarm(20); /* a wait that keeps the CPU the child needs never ends */

    /* A sleep gives back: the child gets in while the block's thread
     * sleeps (it would wait until the block ended otherwise). */
    g_in = 0;
    s = (allot_scope_t)ALLOT_SCOPE_INIT;
    one_cpu_block(&s);
    given = allot_given_back();
    CHECK(pthread_create(&t, NULL, enter_one, NULL) == 0);
    while (!__atomic_load_n(&g_in, __ATOMIC_ACQUIRE)) {
        struct timespec nap = {0, 10 * 1000 * 1000};
        CHECK(nanosleep(&nap, NULL) == 0);
    }
    CHECK(allot_given_back() > given);
    CHECK(pthread_join(t, NULL) == 0);
    allot_require_leave(&s);
    printf("nanosleep gave the CPU back\n");

    /* A contended mutex gives back: the child holds it until it gets the
     * block's CPU, which only the lock's waiter can give it. */
    g_in = 0;
    g_locked = 0;
    s = (allot_scope_t)ALLOT_SCOPE_INIT;
    one_cpu_block(&s);
    CHECK(pthread_create(&t, NULL, enter_one, (void *)1) == 0);
    /* Spin, not a semaphore: a semaphore wait gives the CPU back, and the
     * child could get through its block in that window, before the mutex
     * is contended at all. Spinning keeps the block's CPU. */
    while (!__atomic_load_n(&g_locked, __ATOMIC_ACQUIRE))
        sched_yield();
    given = allot_given_back();
    CHECK(pthread_mutex_lock(&g_mutex) == 0);
    CHECK(__atomic_load_n(&g_in, __ATOMIC_ACQUIRE));
    CHECK(allot_given_back() > given);
    CHECK(pthread_mutex_unlock(&g_mutex) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    allot_require_leave(&s);
    printf("a contended mutex gave the CPU back\n");

    /* A pipe read keeps it: while the block's thread waits for the writer
     * (outside every block), the child cannot get the CPU, and the count
     * of give-backs does not move. */
    g_in = 0;
    CHECK(pipe(g_io) == 0);
    CHECK(sem_init(&g_go, 0, 0) == 0);
    pthread_t w;
    CHECK(pthread_create(&w, NULL, writer, NULL) == 0);
    s = (allot_scope_t)ALLOT_SCOPE_INIT;
    one_cpu_block(&s);
    CHECK(pthread_create(&t, NULL, enter_one, NULL) == 0);
    given = allot_given_back();
    CHECK(sem_post(&g_go) == 0);
    char c;
    CHECK(read(g_io[0], &c, 1) == 1);
    CHECK(allot_given_back() == given);
    CHECK(!__atomic_load_n(&g_in, __ATOMIC_ACQUIRE));
    CHECK(pthread_join(t, NULL) == 0); /* a join gives back: the child gets in */
    CHECK(__atomic_load_n(&g_in, __ATOMIC_ACQUIRE));
    allot_require_leave(&s);
    CHECK(pthread_join(w, NULL) == 0);
    close(g_io[0]);
    close(g_io[1]);
    printf("a pipe read kept the CPU\n");

    /* A choice that names no kind is refused and changes nothing. */
    uint32_t now = 0;
    CHECK(allot_release_on(8, NULL) == ALLOT_ERR_INVALID);
    CHECK(allot_release_on(ALLOT_WAIT_PAPER, &now) == ALLOT_OK);
    CHECK(now == ALLOT_WAIT_PAPER);
    alarm(0);
}

#ifdef _OPENMP
#include <omp.h>

static void *take_every_cpu(void *arg)
{
    (void)arg;
    allot_outcome_t c;
    allot_require(&c, allot_cores((uint32_t)g_ncpus)) {
        CHECK((int)c.ncores == g_ncpus);
    }
    return NULL;
}

/* A block runs an OpenMP region: libgomp creates the team's threads inside
 * it, so they share its CPUs, and then keeps them idle in futex waits of
 * its own. Leaving the block ends them (liballot pauses the OpenMP
 * runtime), so another thread's block for every CPU gets in; without that
 * it would wait for good and the alarm fails the test. */
static void omp_idle(void)
{
    alarm(20);
    int team = 0;
    allot_outcome_t c;
    allot_require(&c, allot_cores((uint32_t)g_ncpus)) {
#pragma omp parallel num_threads(g_ncpus)
        {
#pragma omp atomic
            team++;
        }
    }
    CHECK(team == g_ncpus);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, take_every_cpu, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    printf("the idle team gave the CPUs back\n");
    /* The next region makes a new team. */
    team = 0;
#pragma omp parallel num_threads(g_ncpus)
    {
#pragma omp atomic
        team++;
    }
    CHECK(team == g_ncpus);
    printf("a new team of %d ran\n", team);
}
#endif

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_ncpus = affinity(g_cpus, CPU_SETSIZE);
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "descendants") == 0)
        descendants();
    else if (strcmp(mode, "block_waits") == 0)
        block_waits();
    else if (strcmp(mode, "wait_kinds") == 0)
        wait_kinds();
#ifdef _OPENMP
    else if (strcmp(mode, "omp_idle") == 0)
        omp_idle();
#endif
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("ok %s\n", mode);
    return 0;
}
