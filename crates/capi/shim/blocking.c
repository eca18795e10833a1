/*
 * blocking.c: release-on-block for waits other than joins and condition
 * waits (threads.c): semaphore waits, blocking reads and accepts, and raw
 * futex waits. Part of liballot_shim.so (see shim.h).
 *
 * A thread inside a `require` block that waits gives its allocation back
 * for the length of the wait and retakes it after (Poli-C §2.7), so the
 * threads it waits for can run on it: a block of one CPU whose thread
 * waits in sem_wait for a thread it created would otherwise never let
 * that thread run.
 *
 *  - Every wrapper first asks rq_holds(): one thread-local read in
 *    liballot, 0 for a thread that never entered a block, and for every
 *    thread when liballot is not loaded. Those forward at once.
 *  - Reads and accepts wait for another thread only on a blocking
 *    descriptor (its file status flags lack O_NONBLOCK) that is not a
 *    regular file or a block device (an fcntl and an fstat, paid by
 *    holders only); recv calls with MSG_DONTWAIT do not wait either.
 *    Those forward without giving anything back.
 *  - Futex waits (syscall(SYS_futex, ..., FUTEX_WAIT or FUTEX_WAIT_BITSET,
 *    ...), what programs with their own locks and Rust's std do) use
 *    rq_try_block, which never waits for liballot's own lock: liballot's
 *    locks are futexes too. glibc's own locks, semaphores and condition
 *    variables make their futex calls inline, not through syscall(), and
 *    are covered by their own wrappers (semaphores here, condition waits
 *    in threads.c) or are short (mutexes). Inline-assembly futex calls are
 *    not seen.
 *  - syscall() is also where LLVM's libomp binds its threads
 *    (SYS_sched_setaffinity): a binding the kernel refuses there goes to
 *    bind.c's ladder, as one refused through glibc does.
 *  - Retaking after the wait may itself wait (for CPUs another thread took
 *    meanwhile): to the caller it is a slower return. errno is preserved.
 *  - Versions (glibc 2.36, x86-64): sem_wait, sem_timedwait are
 *    @@GLIBC_2.34 beside the pre-2.34 @GLIBC_2.2.5, which is the same
 *    function; the unversioned wrappers forward to the default versions.
 */

#include "shim.h"

#include <linux/futex.h>
#include <semaphore.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>

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
    B_COUNT
};
static void *g_real_b[B_COUNT];
static const char *const b_name[B_COUNT] = {
    "sem_wait", "sem_timedwait", "sem_clockwait", "read",    "readv",  "recv",
    "recvfrom", "recvmsg",       "accept",        "accept4", "syscall"};

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

/* The wrappers: forward, or give back around the call. */
#define AROUND(waits, call)                                                    \
    do {                                                                       \
        if (LIKELY(!rq_holds()) || !(waits))                                   \
            return call;                                                       \
        rq_block();                                                            \
        __typeof__(call) rc_ = call;                                           \
        rq_unblock();                                                          \
        return rc_;                                                            \
    } while (0)

EXPORT int sem_wait(sem_t *sem)
{
    int (*real)(sem_t *) = b_real(B_SEM_WAIT);
    AROUND(1, real(sem));
}

EXPORT int sem_timedwait(sem_t *restrict sem, const struct timespec *restrict abstime)
{
    int (*real)(sem_t *, const struct timespec *) = b_real(B_SEM_TIMEDWAIT);
    AROUND(1, real(sem, abstime));
}

EXPORT int sem_clockwait(sem_t *restrict sem, clockid_t clock,
                         const struct timespec *restrict abstime)
{
    int (*real)(sem_t *, clockid_t, const struct timespec *) = b_real(B_SEM_CLOCKWAIT);
    AROUND(1, real(sem, clock, abstime));
}

EXPORT ssize_t read(int fd, void *buf, size_t count)
{
    ssize_t (*real)(int, void *, size_t) = b_real(B_READ);
    AROUND(may_wait_on(fd), real(fd, buf, count));
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
    ssize_t (*real)(int, const struct iovec *, int) = b_real(B_READV);
    AROUND(may_wait_on(fd), real(fd, iov, iovcnt));
}

EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    ssize_t (*real)(int, void *, size_t, int) = b_real(B_RECV);
    AROUND(!(flags & MSG_DONTWAIT) && may_wait_on(fd), real(fd, buf, len, flags));
}

EXPORT ssize_t recvfrom(int fd, void *restrict buf, size_t len, int flags,
                        struct sockaddr *restrict addr, socklen_t *restrict alen)
{
    ssize_t (*real)(int, void *, size_t, int, struct sockaddr *, socklen_t *) =
        b_real(B_RECVFROM);
    AROUND(!(flags & MSG_DONTWAIT) && may_wait_on(fd), real(fd, buf, len, flags, addr, alen));
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    ssize_t (*real)(int, struct msghdr *, int) = b_real(B_RECVMSG);
    AROUND(!(flags & MSG_DONTWAIT) && may_wait_on(fd), real(fd, msg, flags));
}

EXPORT int accept(int fd, struct sockaddr *restrict addr, socklen_t *restrict alen)
{
    int (*real)(int, struct sockaddr *, socklen_t *) = b_real(B_ACCEPT);
    AROUND(may_wait_on(fd), real(fd, addr, alen));
}

EXPORT int accept4(int fd, struct sockaddr *restrict addr, socklen_t *restrict alen, int flags)
{
    int (*real)(int, struct sockaddr *, socklen_t *, int) = b_real(B_ACCEPT4);
    AROUND(may_wait_on(fd), real(fd, addr, alen, flags));
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
    if ((cmd != FUTEX_WAIT && cmd != FUTEX_WAIT_BITSET) || LIKELY(!rq_holds()))
        return real(number, a1, a2, a3, a4, a5, a6);
    int blocked = rq_try_block();
    long rc = real(number, a1, a2, a3, a4, a5, a6);
    if (blocked)
        rq_unblock();
    return rc;
}
