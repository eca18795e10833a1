/*
 * blocking.c: release-on-block for waits other than joins and condition
 * waits (threads.c): semaphore, futex and contended mutex waits, sleeps,
 * and waits for descriptors. Part of liballot_shim.so (see shim.h).
 *
 * A thread inside a `require` block that waits may give its allocation
 * back for the length of the wait and retake it after (Poli-C §2.7), so
 * the threads it waits for can run on it: a block of one CPU whose thread
 * waits in sem_wait for a thread it created would otherwise never let
 * that thread run. Whether it does is decided per kind of wait
 * (ALLOT_WAIT_* in allot/require.h, chosen per thread with
 * allot_release_on): by default every wait but I/O, the paper's rule, so
 * a block waiting on a socket keeps what it holds, exclusivity included.
 *
 *  - Every wrapper first asks rq_releases(kind): thread-local reads in
 *    liballot, 0 for a thread that never entered a block or keeps its
 *    allocation through that kind of wait, and for every thread when
 *    liballot is not loaded. Those forward at once.
 *  - SYNC: semaphores; futex waits (syscall(SYS_futex, ..., FUTEX_WAIT or
 *    FUTEX_WAIT_BITSET, ...), what programs with their own locks and Rust's
 *    std do) through rq_try_block, which gives nothing back for a wait
 *    made inside liballot (its locks are futexes too) and says whether it
 *    gave back; pthread_mutex_lock only when
 *    the mutex is taken (a trylock first). glibc's condition variables
 *    are threads.c's; its internal locks make their futex calls inline and
 *    are not seen, nor are inline-assembly futex calls.
 *  - SLEEP: nanosleep, clock_nanosleep, sleep, usleep (glibc's sleep and
 *    usleep call the kernel themselves, so each is wrapped).
 *  - IO: reads and accepts on a blocking descriptor (its file status flags
 *    lack O_NONBLOCK) that is not a regular file or a block device (an
 *    fcntl and an fstat, paid only by threads that release on I/O); recv
 *    calls with MSG_DONTWAIT do not wait; poll, ppoll, select, pselect,
 *    epoll_wait and epoll_pwait with a zero timeout do not wait.
 *  - syscall() is also where LLVM's libomp binds its threads
 *    (SYS_sched_setaffinity): a binding the kernel refuses there goes to
 *    bind.c's ladder, as one refused through glibc does.
 *  - Retaking after the wait may itself wait (for CPUs another thread took
 *    meanwhile): to the caller it is a slower return. errno is preserved.
 *  - Versions (glibc 2.36, x86-64): sem_wait, sem_timedwait are
 *    @@GLIBC_2.34 beside the pre-2.34 @GLIBC_2.2.5, which is the same
 *    function; pthread_mutex_lock is @@GLIBC_2.2.5; the unversioned
 *    wrappers forward to the default versions.
 */

#include "shim.h"

#include <linux/futex.h>
#include <poll.h>
#include <semaphore.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>

enum blocking_sym {
    B_SEM_WAIT,
    B_SEM_TIMEDWAIT,
    B_SEM_CLOCKWAIT,
    B_READ,
    B_READV,
    B_RECV,
    B_RECVFROM,
    B_RECVMSG,
    B_ACCEPT,
    B_ACCEPT4,
    B_SYSCALL,
    B_NANOSLEEP,
    B_CLOCK_NANOSLEEP,
    B_SLEEP,
    B_USLEEP,
    B_POLL,
    B_PPOLL,
    B_SELECT,
    B_PSELECT,
    B_EPOLL_WAIT,
    B_EPOLL_PWAIT,
    B_MUTEX_LOCK,
    B_COUNT
};
static void *g_real_b[B_COUNT];
static const char *const b_name[B_COUNT] = {
    "sem_wait",     "sem_timedwait",      "sem_clockwait", "read",       "readv",
    "recv",         "recvfrom",           "recvmsg",       "accept",     "accept4",
    "syscall",      "nanosleep",          "clock_nanosleep", "sleep",    "usleep",
    "poll",         "ppoll",              "select",        "pselect",    "epoll_wait",
    "epoll_pwait",  "pthread_mutex_lock"};

static __attribute__((noinline)) void *b_slow(enum blocking_sym s)
{
    void *f = dlsym(RTLD_NEXT, b_name[s]);
    if (f == NULL)
        die("no library provides", b_name[s]);
    __atomic_store_n(&g_real_b[s], f, __ATOMIC_RELEASE);
    return f;
}

static inline void *b_real(enum blocking_sym s)
{
    void *f = __atomic_load_n(&g_real_b[s], __ATOMIC_ACQUIRE);
    return LIKELY(f != NULL) ? f : b_slow(s);
}

/* Whether a read or accept on `fd` may wait for another thread: a
 * blocking descriptor that is not a regular file or a block device (whose
 * reads wait for the disk, not for a thread to run). */
static int may_wait_on(int fd)
{
    int saved = errno;
    struct stat st;
    int fl = fcntl(fd, F_GETFL);
    int waits = fl >= 0 && !(fl & O_NONBLOCK) && fstat(fd, &st) == 0 &&
                !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode);
    errno = saved;
    return waits;
}

/* The wrappers: forward, or give back around the call (a wait of `kind`
 * that `waits`, the condition evaluated only for threads that release). */
#define AROUND(kind, waits, call)                                              \
    do {                                                                       \
        if (LIKELY(!rq_releases(kind)) || !(waits))                            \
            return call;                                                       \
        rq_block_for(kind);                                                    \
        __typeof__(call) rc_ = call;                                           \
        rq_unblock();                                                          \
        return rc_;                                                            \
    } while (0)

EXPORT int sem_wait(sem_t *sem)
{
    int (*real)(sem_t *) = b_real(B_SEM_WAIT);
    AROUND(RQ_WAIT_SYNC, 1, real(sem));
}

EXPORT int sem_timedwait(sem_t *restrict sem, const struct timespec *restrict abstime)
{
    int (*real)(sem_t *, const struct timespec *) = b_real(B_SEM_TIMEDWAIT);
    AROUND(RQ_WAIT_SYNC, 1, real(sem, abstime));
}

EXPORT int sem_clockwait(sem_t *restrict sem, clockid_t clock,
                         const struct timespec *restrict abstime)
{
    int (*real)(sem_t *, clockid_t, const struct timespec *) = b_real(B_SEM_CLOCKWAIT);
    AROUND(RQ_WAIT_SYNC, 1, real(sem, clock, abstime));
}

EXPORT ssize_t read(int fd, void *buf, size_t count)
{
    ssize_t (*real)(int, void *, size_t) = b_real(B_READ);
    AROUND(RQ_WAIT_IO, may_wait_on(fd), real(fd, buf, count));
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
    ssize_t (*real)(int, const struct iovec *, int) = b_real(B_READV);
    AROUND(RQ_WAIT_IO, may_wait_on(fd), real(fd, iov, iovcnt));
}

EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    ssize_t (*real)(int, void *, size_t, int) = b_real(B_RECV);
    AROUND(RQ_WAIT_IO, !(flags & MSG_DONTWAIT) && may_wait_on(fd), real(fd, buf, len, flags));
}

EXPORT ssize_t recvfrom(int fd, void *restrict buf, size_t len, int flags,
                        struct sockaddr *restrict addr, socklen_t *restrict alen)
{
    ssize_t (*real)(int, void *, size_t, int, struct sockaddr *, socklen_t *) =
        b_real(B_RECVFROM);
    AROUND(RQ_WAIT_IO, !(flags & MSG_DONTWAIT) && may_wait_on(fd), real(fd, buf, len, flags, addr, alen));
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    ssize_t (*real)(int, struct msghdr *, int) = b_real(B_RECVMSG);
    AROUND(RQ_WAIT_IO, !(flags & MSG_DONTWAIT) && may_wait_on(fd), real(fd, msg, flags));
}

EXPORT int accept(int fd, struct sockaddr *restrict addr, socklen_t *restrict alen)
{
    int (*real)(int, struct sockaddr *, socklen_t *) = b_real(B_ACCEPT);
    AROUND(RQ_WAIT_IO, may_wait_on(fd), real(fd, addr, alen));
}

EXPORT int accept4(int fd, struct sockaddr *restrict addr, socklen_t *restrict alen, int flags)
{
    int (*real)(int, struct sockaddr *, socklen_t *, int) = b_real(B_ACCEPT4);
    AROUND(RQ_WAIT_IO, may_wait_on(fd), real(fd, addr, alen, flags));
}

/* syscall(2): futex waits give back (rq_try_block); a refused
 * sched_setaffinity is carried into the grant (bind_retry_raw); every other call, and
 * every call of a thread that holds nothing, is forwarded with six
 * arguments, as glibc's own syscall() loads six registers whatever the
 * caller passed (the kernel reads the ones the call has). */
EXPORT long syscall(long number, ...)
{
    long (*real)(long, ...) = b_real(B_SYSCALL);
    va_list ap;
    va_start(ap, number);
    long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
    long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
    va_end(ap);
    if (LIKELY(number != SYS_futex)) {
        long rc = real(number, a1, a2, a3, a4, a5, a6);
        /* A binding refused outside the grant (LLVM's libomp): bind.c. */
        if (UNLIKELY(number == SYS_sched_setaffinity) && rc == -1 && errno == EINVAL)
            return bind_retry_raw(a1, a2, a3);
        return rc;
    }
    int cmd = (int)a2 & FUTEX_CMD_MASK;
    if ((cmd != FUTEX_WAIT && cmd != FUTEX_WAIT_BITSET) || LIKELY(!rq_releases(RQ_WAIT_SYNC)))
        return real(number, a1, a2, a3, a4, a5, a6);
    int blocked = rq_try_block();
    long rc = real(number, a1, a2, a3, a4, a5, a6);
    if (blocked)
        rq_unblock();
    return rc;
}

/* ---- sleeps ---------------------------------------------------------- */

EXPORT int nanosleep(const struct timespec *req, struct timespec *rem)
{
    int (*real)(const struct timespec *, struct timespec *) = b_real(B_NANOSLEEP);
    AROUND(RQ_WAIT_SLEEP, 1, real(req, rem));
}

EXPORT int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req,
                           struct timespec *rem)
{
    int (*real)(clockid_t, int, const struct timespec *, struct timespec *) =
        b_real(B_CLOCK_NANOSLEEP);
    AROUND(RQ_WAIT_SLEEP, 1, real(clock, flags, req, rem));
}

EXPORT unsigned int sleep(unsigned int seconds)
{
    unsigned int (*real)(unsigned int) = b_real(B_SLEEP);
    AROUND(RQ_WAIT_SLEEP, seconds > 0, real(seconds));
}

EXPORT int usleep(useconds_t usec)
{
    int (*real)(useconds_t) = b_real(B_USLEEP);
    AROUND(RQ_WAIT_SLEEP, usec > 0, real(usec));
}

/* ---- waits for descriptors ------------------------------------------- */

static int waits_timeval(const struct timeval *t)
{
    return t == NULL || t->tv_sec != 0 || t->tv_usec != 0;
}

static int waits_timespec(const struct timespec *t)
{
    return t == NULL || t->tv_sec != 0 || t->tv_nsec != 0;
}

EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    int (*real)(struct pollfd *, nfds_t, int) = b_real(B_POLL);
    AROUND(RQ_WAIT_IO, timeout != 0, real(fds, n, timeout));
}

EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
                 const sigset_t *mask)
{
    int (*real)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *) =
        b_real(B_PPOLL);
    AROUND(RQ_WAIT_IO, waits_timespec(timeout), real(fds, n, timeout, mask));
}

EXPORT int select(int n, fd_set *restrict r, fd_set *restrict w, fd_set *restrict e,
                  struct timeval *restrict timeout)
{
    int (*real)(int, fd_set *, fd_set *, fd_set *, struct timeval *) = b_real(B_SELECT);
    AROUND(RQ_WAIT_IO, waits_timeval(timeout), real(n, r, w, e, timeout));
}

EXPORT int pselect(int n, fd_set *restrict r, fd_set *restrict w, fd_set *restrict e,
                   const struct timespec *restrict timeout, const sigset_t *restrict mask)
{
    int (*real)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *) =
        b_real(B_PSELECT);
    AROUND(RQ_WAIT_IO, waits_timespec(timeout), real(n, r, w, e, timeout, mask));
}

EXPORT int epoll_wait(int epfd, struct epoll_event *events, int max, int timeout)
{
    int (*real)(int, struct epoll_event *, int, int) = b_real(B_EPOLL_WAIT);
    AROUND(RQ_WAIT_IO, timeout != 0, real(epfd, events, max, timeout));
}

EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int max, int timeout,
                       const sigset_t *mask)
{
    int (*real)(int, struct epoll_event *, int, int, const sigset_t *) = b_real(B_EPOLL_PWAIT);
    AROUND(RQ_WAIT_IO, timeout != 0, real(epfd, events, max, timeout, mask));
}

/* ---- contended mutexes ----------------------------------------------- */

/* Only a mutex another thread holds makes a wait: a trylock first. Its
 * answer is the lock's whenever it is not EBUSY (taken, EOWNERDEAD of a
 * robust mutex, EINVAL, EAGAIN of a recursive count). Once the lock is
 * taken the allocation is retaken as after a condition wait: a thread
 * waiting for its CPUs does not keep the lock others need to give them
 * back. */
EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
    int (*real)(pthread_mutex_t *) = b_real(B_MUTEX_LOCK);
    if (LIKELY(!rq_releases(RQ_WAIT_SYNC)))
        return real(m);
    int rc = pthread_mutex_trylock(m);
    if (rc != EBUSY)
        return rc;
    rq_block_for(RQ_WAIT_SYNC);
    rc = real(m);
    if (rc == 0 || rc == EOWNERDEAD)
        rq_after_wait(m); /* never waits for CPUs while holding the lock */
    else
        rq_unblock();
    return rc;
}
