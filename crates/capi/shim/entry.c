/*
 * entry.c: the entry points that more than one part of the shim acts on.
 * Part of liballot_shim.so (see shim.h).
 *
 * A library that sizes its thread pool asks for its CPUs when it starts
 * (sched_getaffinity: OpenBLAS, libgomp, oneTBB and most others, also when
 * they start with one CPU and create no thread) or starts the pool's
 * threads (pthread_create). Either is where a library loaded since the
 * last look is found, so follow.c looks first (follow_rescan: the
 * libraries whose count follows the grant, and liballot, whose require
 * hooks threads.c then uses); then the call goes on: pthread_create
 * through threads.c (require blocks, and bindings carried by bind.c),
 * sched_getaffinity to libc. Both preserve errno as their parts do.
 */

#include "shim.h"

EXPORT int sched_getaffinity(pid_t pid, size_t size, cpu_set_t *mask)
{
    follow_rescan();
    return real_sched_getaffinity(pid, size, mask);
}

EXPORT int pthread_create(pthread_t *restrict thread, const pthread_attr_t *restrict attr,
                          void *(*start)(void *), void *restrict arg)
{
    follow_rescan();
    return rq_pthread_create(thread, attr, start, arg);
}
