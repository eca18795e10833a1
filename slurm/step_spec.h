/* What a Slurm job step asks allot for: a pure mapping from the facts
 * Slurm gives the plugin about the step on this node to an allot_spec_t.
 * Kept apart from the plugin so that it can be tested without Slurm
 * (slurm/test_step_spec.c) and read in one place.
 *
 *   job's request                    cell
 *   -------------                    ----
 *   --exclusive (whole node)         exclusive, min = max = the step's CPUs
 *   default (CPUs of its own)        min = the step's CPUs, may borrow idle
 *                                    CPUs (max = 0) unless borrow is off
 *   --oversubscribe                  best effort (min = 0): Slurm promised
 *                                    it no CPUs of its own; may use any
 *   every job                        weight = the step's CPUs, so contended
 *                                    CPUs are shared in proportion to what
 *                                    each job asked Slurm for
 *
 * "The step's CPUs" is what Slurm allocated the job on this node
 * (S_JOB_NCPUS: --cpus-per-task times the local tasks, or the whole node
 * under --exclusive), at least 1.
 *
 *   --mem=M (per node)               memory guaranteed = limit = M
 *   --mem-per-cpu=M                  M times the step's CPUs
 *   neither                          no memory of its own (Slurm's and
 *                                    the node's limits still hold)
 *
 * Slurm reserved that memory for the job on this node, so it is the
 * cell's guarantee; it is the most Slurm lets the job use, so it is the
 * cell's limit. */
#ifndef ALLOT_SLURM_STEP_SPEC_H
#define ALLOT_SLURM_STEP_SPEC_H

#include <allot.h>
#include <stdint.h>
#include <string.h>

/* How the job shares its node, from Slurm's job record. */
enum allot_slurm_sharing {
    ALLOT_SLURM_DEFAULT = 0,      /* its own CPUs, the node shared */
    ALLOT_SLURM_EXCLUSIVE = 1,    /* --exclusive: the whole node */
    ALLOT_SLURM_OVERSUBSCRIBE = 2 /* --oversubscribe: CPUs shared too */
};

/* The facts the mapping reads. */
struct allot_slurm_step {
    uint32_t cpus;                    /* CPUs allocated on this node */
    enum allot_slurm_sharing sharing; /* from the job record */
    int borrow;                       /* may use idle CPUs beyond `cpus` */
};

static inline allot_spec_t allot_slurm_step_spec(struct allot_slurm_step s)
{
    allot_spec_t spec = {0};
    uint32_t cpus = s.cpus ? s.cpus : 1;
    spec.weight = cpus > 10000 ? 10000 : cpus;
    switch (s.sharing) {
    case ALLOT_SLURM_EXCLUSIVE:
        spec.min = cpus;
        spec.max = cpus;
        spec.exclusive = 1;
        break;
    case ALLOT_SLURM_OVERSUBSCRIBE:
        spec.min = 0;
        spec.max = s.borrow ? 0 : cpus;
        break;
    default:
        spec.min = cpus;
        spec.max = s.borrow ? 0 : cpus;
        break;
    }
    spec.placement = ALLOT_PLACEMENT_ANY;
    return spec;
}

/* The memory a job asked Slurm for on this node, bytes (0: none):
 * `mb` is the job record's pn_min_memory without its per-CPU flag, in
 * MiB; `per_cpu` whether that flag was set (--mem-per-cpu). */
static inline uint64_t allot_slurm_step_memory(uint64_t mb, int per_cpu, uint32_t cpus)
{
    uint64_t n = per_cpu ? (cpus ? cpus : 1) : 1;
    if (mb == 0 || mb > UINT64_MAX / (n << 20))
        return 0;
    return mb * n << 20;
}

/* The best-effort fallback when the broker cannot guarantee the CPUs now
 * (another job holds them: Slurm and allot disagree about the node, e.g.
 * a CPU the broker does not manage): the same weight and maximum, no
 * guarantee, not exclusive. */
static inline allot_spec_t allot_slurm_best_effort(allot_spec_t spec)
{
    spec.min = 0;
    spec.exclusive = 0;
    return spec;
}

/* Slurm's cgroup/v2 plugins keep a step's processes in cgroups of their
 * own: slurmstepd in .../job_J/step_S/slurm, the tasks in
 * .../job_J/step_S/user/task_T (the path below the hierarchy's mount,
 * as /proc/PID/cgroup's "0::" line gives it). The cell includes the
 * step's `user` group instead of moving the tasks (docs/slurm.md).
 *
 * allot_slurm_user_group: copies into `out` the prefix of `path` that
 * ends at the first component "user" right below a component "step_...",
 * and returns 1; returns 0 (out unchanged) when there is none or it does
 * not fit `n` bytes with its NUL. */
static inline int allot_slurm_user_group(const char *path, char *out, size_t n)
{
    const char *p = path, *prev = NULL;
    size_t prev_len = 0;
    while (*p == '/') {
        const char *c = p + 1;
        size_t len = strcspn(c, "/\n");
        if (len == 4 && strncmp(c, "user", 4) == 0 && prev && prev_len > 5 &&
            strncmp(prev, "step_", 5) == 0) {
            size_t keep = (size_t)(c + len - path);
            if (keep + 1 > n)
                return 0;
            memcpy(out, path, keep);
            out[keep] = '\0';
            return 1;
        }
        prev = c;
        prev_len = len;
        p = c + len;
    }
    return 0;
}

/* allot_slurm_owns_cgroups: whether a slurmstepd in cgroup `path` (same
 * form) runs under Slurm's cgroup/v2 plugin: its path names slurmstepd's
 * scope or a job's cgroup ("/job_J/"). Under task/none with
 * proctrack/linuxproc slurmstepd stays in slurmd's cgroup, and allot
 * moves it into the cell as on cgroup v1. */
static inline int allot_slurm_owns_cgroups(const char *path)
{
    return strstr(path, "/slurmstepd.scope") != NULL || strstr(path, "/job_") != NULL;
}

#endif
