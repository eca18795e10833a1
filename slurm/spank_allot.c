/* allot's SPANK plugin: the job steps of every Slurm job on a node run in
 * one allot cell of the node's broker, the job's cell `slurm-JOB`.
 *
 * Where it acts (remote context, inside slurmstepd, once per step):
 *
 *   slurm_spank_init_post_opt  (root, before any task exists)
 *       The job's first step on the node registers slurmstepd itself as
 *       the job's cell, with the spec step_spec.h maps the job's request
 *       to, and keeps the cell's ticket (allot_cell_ticket) in the state
 *       directory, readable by root only. Later steps of the job (srun
 *       inside a batch script) attach to that cell with the ticket
 *       (allot_cell_attach_at) instead of asking for the job's CPUs a
 *       second time. Either way the broker confines slurmstepd before the
 *       tasks exist, so every task inherits the cell's CPUs and runs its
 *       first instruction inside.
 *   slurm_spank_user_init      (as the user, before the tasks fork)
 *       Puts the cell's environment in the tasks' environment, the one
 *       `allot run` gives (allot_cell_environment): thread counts, the
 *       grant page, the OpenMP shim when the operator named one, and
 *       allot's Thread Composability Manager for oneTBB and Intel OpenMP
 *       when the operator named its directory (allot_cell_tcm_environment,
 *       unless the user set TCM_ENABLE). A step
 *       without a cell gets allot's variables removed instead, so that
 *       none inherited from the submitting shell points at a stale cell.
 *   slurm_spank_task_post_fork (root, in slurmstepd, after each task's
 *                               fork, once Slurm tracks it)
 *       Under Slurm's cgroup/v2 plugins (task/cgroup, proctrack/cgroup),
 *       which keep the step's processes in cgroups of Slurm's: the job's
 *       cell includes the step's `user` group, where the task is
 *       (allot_cell_include_group_at), instead of anyone moving a task;
 *       slurmstepd itself was registered or attached in place
 *       (allot_cell_register_in_place_at, allot_cell_attach_in_place_at).
 *   slurm_spank_job_epilog     (root, once per job and node, at its end)
 *       Removes the job's ticket.
 *
 * The cell is never released by the plugin: it ends when the last of the
 * job's processes on the node is gone (the broker watches them).
 *
 * An allot failure never fails the job: every error is logged (slurmd's
 * log, "allot: ...") and the step runs as it would without the plugin.
 *
 * Options in plugstack.conf, after the plugin's path:
 *   socket=PATH   the broker's socket (default /run/allot/allot.sock)
 *   shim=PATH     liballot_shim.so, installed by root (default: no shim;
 *                 OpenMP teams then keep their launch size)
 *   tcm=DIR       the directory of allot's libtcm.so.1, installed by root
 *                 (`allot shim --out D` writes D/tcm; default: none, and
 *                 oneTBB and Intel OpenMP size themselves)
 *   state=DIR     where the jobs' tickets are kept, created 0700 by root
 *                 (default /run/allot/slurm)
 *   borrow=no     a job never holds more CPUs than Slurm gave it (default
 *                 yes: idle CPUs of the node are lent to running jobs)
 * and for users, on sbatch/srun/salloc:
 *   --allot=off   run this job's steps without allot
 *
 * The operator's guide is docs/slurm.md. */
#define _GNU_SOURCE /* O_DIRECTORY, O_NOFOLLOW, O_CLOEXEC, linkat */
#include <errno.h>
#include <fcntl.h>
#include <slurm/slurm.h>
#include <slurm/spank.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <allot.h>

#include "step_spec.h"

SPANK_PLUGIN(allot, 1);

#define DEFAULT_SOCKET "/run/allot/allot.sock"
#define DEFAULT_STATE "/run/allot/slurm"

/* Slurm's special step ids (slurm.h defines them too; kept here so the
 * plugin reads the same with older headers). */
#define STEP_EXTERN 0xfffffffcu
#define STEP_BATCH 0xfffffffbu
#define STEP_INTERACTIVE 0xfffffffau

static struct {
    char socket[4096];
    char shim[4096];
    char tcm[4096];
    char state[4096];
    int borrow;
} conf = {DEFAULT_SOCKET, "", "", DEFAULT_STATE, 1};

static int user_off;        /* --allot=off */
static allot_cell_t cell;   /* the step's cell; id 0: none */

/* Slurm's cgroup/v2 plugins own this step's cgroups (step_spec.h): the
 * cell includes the step's `user` group; nothing is moved. */
static int slurm_cgroups;
static char kept_ticket[ALLOT_TICKET_MAX]; /* the cell's, for including groups */
static char included[8192];                /* the last group included */

static int opt_allot(int val, const char *arg, int remote)
{
    (void)val;
    (void)remote;
    if (arg && strcmp(arg, "off") == 0) {
        user_off = 1;
        return 0;
    }
    if (arg && strcmp(arg, "on") == 0) {
        user_off = 0;
        return 0;
    }
    slurm_error("allot: --allot=%s: expected on or off", arg ? arg : "");
    return -1;
}

static struct spank_option option = {
    "allot", "on|off",
    "Run the job's steps in allot cells (default on); off runs them plain.",
    1, 0, opt_allot,
};

/* Copies the value of `arg` into `dst` if `arg` is `key=VALUE`; 1 if the
 * key matched (a value too long is logged and ignored). */
static int option_value(const char *arg, const char *key, char *dst, size_t len)
{
    size_t k = strlen(key);
    if (strncmp(arg, key, k) != 0 || arg[k] != '=')
        return 0;
    if (strlen(arg + k + 1) >= len)
        slurm_error("allot: plugstack.conf option %s is longer than %zu bytes; ignored",
                    key, len - 1);
    else
        strcpy(dst, arg + k + 1);
    return 1;
}

static int parse_args(int ac, char **av)
{
    for (int i = 0; i < ac; i++) {
        const char *a = av[i];
        if (option_value(a, "socket", conf.socket, sizeof conf.socket) ||
            option_value(a, "shim", conf.shim, sizeof conf.shim) ||
            option_value(a, "tcm", conf.tcm, sizeof conf.tcm) ||
            option_value(a, "state", conf.state, sizeof conf.state))
            continue;
        if (strcmp(a, "borrow=yes") == 0) {
            conf.borrow = 1;
        } else if (strcmp(a, "borrow=no") == 0) {
            conf.borrow = 0;
        } else {
            slurm_error("allot: unknown plugstack.conf option \"%s\" "
                        "(known: socket=PATH, shim=PATH, tcm=DIR, state=DIR, borrow=yes|no); ignored",
                        a);
        }
    }
    return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    parse_args(ac, av);
    spank_context_t ctx = spank_context();
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE)
        return 0;
    /* Registering the option never fails the job either. */
    if (spank_option_register(sp, &option) != ESPANK_SUCCESS)
        slurm_error("allot: cannot register the --allot option");
    return 0;
}

/* How the job shares its node, and the memory it asked for (its record's
 * pn_min_memory, MiB, and whether that is per CPU), from slurmctld's
 * record of it. Unknown (slurmctld not answering) reads as the default
 * and no memory. */
static enum allot_slurm_sharing job_facts(uint32_t job, uint64_t *mem_mb, int *per_cpu)
{
    job_info_msg_t *msg = NULL;
    enum allot_slurm_sharing s = ALLOT_SLURM_DEFAULT;
    *mem_mb = 0;
    *per_cpu = 0;
    if (slurm_load_job(&msg, job, SHOW_DETAIL) != 0 || !msg ||
        msg->record_count < 1) {
        slurm_info("allot: job %u: cannot read the job's record (%s); "
                   "taking it as neither exclusive nor oversubscribed",
                   job, slurm_strerror(slurm_get_errno()));
    } else {
        slurm_job_info_t *j = &msg->job_array[0];
        if (j->pn_min_memory != NO_VAL64) {
            *per_cpu = (j->pn_min_memory & MEM_PER_CPU) != 0;
            *mem_mb = j->pn_min_memory & ~MEM_PER_CPU;
        }
        if (j->shared == JOB_SHARED_NONE)
            s = ALLOT_SLURM_EXCLUSIVE;
        else if (j->shared == JOB_SHARED_OK)
            s = ALLOT_SLURM_OVERSUBSCRIBE;
    }
    if (msg)
        slurm_free_job_info_msg(msg);
    return s;
}

static void step_name(char *buf, size_t len, uint32_t job, uint32_t step)
{
    if (step == STEP_BATCH)
        snprintf(buf, len, "%u.batch", job);
    else if (step == STEP_INTERACTIVE)
        snprintf(buf, len, "%u.interactive", job);
    else
        snprintf(buf, len, "%u.%u", job, step);
}

/* The state directory, opened: created 0700 if missing, and trusted only
 * if it is root's, not a symbolic link, and nobody else may write it.
 * -1 (logged) otherwise. */
static int open_state(void)
{
    if (mkdir(conf.state, 0700) != 0 && errno != EEXIST) {
        slurm_error("allot: cannot create %s: %s", conf.state, strerror(errno));
        return -1;
    }
    int dir = open(conf.state, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (dir < 0 || fstat(dir, &st) != 0) {
        slurm_error("allot: cannot open %s: %s", conf.state, strerror(errno));
        if (dir >= 0)
            close(dir);
        return -1;
    }
    if (st.st_uid != 0 || (st.st_mode & 022)) {
        slurm_error("allot: %s is not root's alone (owner %u, mode %o); "
                    "no tickets are kept there",
                    conf.state, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        close(dir);
        return -1;
    }
    return dir;
}

/* Reads job `job`'s ticket into buf; 0 when there is one. */
static int read_ticket(int dir, const char *file, char *buf, size_t len)
{
    int fd = openat(dir, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && st.st_uid == 0 && !(st.st_mode & 077))
        n = read(fd, buf, len - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

/* Keeps the ticket of the cell just registered. If another step of the
 * job kept one first, that one stays (this step keeps its own cell). */
static void keep_ticket(int dir, const char *file, const char *what)
{
    char ticket[ALLOT_TICKET_MAX];
    char tmp[96];
    if (allot_cell_ticket(cell, ticket, sizeof ticket) != ALLOT_OK) {
        slurm_error("allot: %s: %s; later steps get cells of their own",
                    what, allot_last_error());
        return;
    }
    snprintf(tmp, sizeof tmp, ".%s.%ld", file, (long)getpid());
    int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        slurm_error("allot: %s: cannot write %s/%s: %s", what, conf.state, tmp,
                    strerror(errno));
        return;
    }
    size_t n = strlen(ticket);
    int written = write(fd, ticket, n) == (ssize_t)n;
    close(fd);
    if (!written || linkat(dir, tmp, dir, file, 0) != 0)
        slurm_info("allot: %s: the job's ticket was kept by another step first "
                   "(%s); this step keeps its own cell",
                   what, written ? strerror(errno) : "short write");
    unlinkat(dir, tmp, 0);
}

/* The cgroup v2 path of process `pid` (0: this one) below the
 * hierarchy's mount, from the one "0::" line of a pure v2 hierarchy;
 * 0 when the process is not on a pure v2 hierarchy or it cannot be read. */
static int v2_path_of(pid_t pid, char *out, size_t n)
{
    char file[64], line[4096];
    if (pid)
        snprintf(file, sizeof file, "/proc/%d/cgroup", (int)pid);
    else
        snprintf(file, sizeof file, "/proc/self/cgroup");
    FILE *f = fopen(file, "re");
    if (!f)
        return 0;
    int lines = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        if (strncmp(line, "0::", 3) == 0 && strlen(line + 3) < n) {
            strcpy(out, line + 3);
            out[strcspn(out, "\n")] = '\0';
            found = 1;
        }
    }
    fclose(f);
    return found && lines == 1;
}

/* Where the cgroup v2 hierarchy is mounted (usually /sys/fs/cgroup). */
static int v2_mount(char *out, size_t n)
{
    char dev[256], dir[4096], type[64];
    FILE *f = fopen("/proc/self/mounts", "re");
    if (!f)
        return 0;
    int found = 0;
    while (fscanf(f, "%255s %4095s %63s %*[^\n]", dev, dir, type) == 3)
        if (strcmp(type, "cgroup2") == 0 && strlen(dir) < n) {
            strcpy(out, dir);
            found = 1;
            break;
        }
    fclose(f);
    return found;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_context() != S_CTX_REMOTE)
        return 0;
    uint32_t job = 0, step = 0;
    uint16_t ncpus = 0;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS) {
        slurm_error("allot: cannot read the job and step ids; the step runs without allot");
        return 0;
    }
    if (step == STEP_EXTERN)
        return 0; /* the job's container for adopted processes, not a step */
    char what[64], name[64], file[32], ticket[ALLOT_TICKET_MAX];
    step_name(what, sizeof what, job, step);
    if (user_off) {
        slurm_info("allot: %s: --allot=off; the step runs without allot", what);
        return 0;
    }
    snprintf(name, sizeof name, "slurm-%u", job);
    snprintf(file, sizeof file, "job-%u", job);
    char own[4096];
    slurm_cgroups = v2_path_of(0, own, sizeof own) && allot_slurm_owns_cgroups(own);
    const char *where = slurm_cgroups ? ", through Slurm's cgroups" : "";
    int dir = open_state();
    int stale = 0;

    /* A later step of the job: the job's cell. */
    if (dir >= 0 && read_ticket(dir, file, ticket, sizeof ticket) == 0) {
        int rc = slurm_cgroups ? allot_cell_attach_in_place_at(conf.socket, ticket, &cell)
                               : allot_cell_attach_at(conf.socket, ticket, &cell);
        if (rc == ALLOT_OK) {
            uint64_t id = 0;
            allot_cell_broker_id(cell, &id);
            snprintf(kept_ticket, sizeof kept_ticket, "%s", ticket);
            slurm_info("allot: %s runs in its job's cell %llu (%s%s)", what,
                       (unsigned long long)id, name, where);
            close(dir);
            return 0;
        }
        /* The cell ended (its processes are gone), or the broker does not
         * answer: the ticket is replaced only once a new cell proves the
         * broker is there. */
        slurm_info("allot: %s: cannot join the job's cell (%s); registering it again",
                   what, allot_last_error());
        stale = 1;
        cell.id = 0;
    }

    /* The job's first step on the node: a cell for the job. */
    if (spank_get_item(sp, S_JOB_NCPUS, &ncpus) != ESPANK_SUCCESS)
        ncpus = 0;
    uint64_t mem_mb = 0;
    int per_cpu = 0;
    struct allot_slurm_step facts = {ncpus, job_facts(job, &mem_mb, &per_cpu), conf.borrow};
    allot_spec_t spec = allot_slurm_step_spec(facts);
    uint64_t memory = allot_slurm_step_memory(mem_mb, per_cpu, ncpus);
    int (*reg)(const char *, const char *, const allot_spec_t *, int, allot_cell_t *) =
        slurm_cgroups ? allot_cell_register_in_place_at : allot_cell_register_at;
    int rc = reg(conf.socket, name, &spec, 0, &cell);
    if (rc == ALLOT_ERR_REFUSED || rc == ALLOT_ERR_NEVER) {
        slurm_info("allot: %s: %s; asking for a best-effort cell instead",
                   what, allot_last_error());
        spec = allot_slurm_best_effort(spec);
        rc = reg(conf.socket, name, &spec, 0, &cell);
    }
    if (rc != ALLOT_OK) {
        slurm_error("allot: %s: %s; the step runs without allot", what,
                    allot_last_error());
        cell.id = 0;
        if (dir >= 0)
            close(dir);
        return 0;
    }
    /* The memory Slurm reserved for the job here: the cell's guarantee
     * and limit. A broker that cannot keep it leaves the cell without. */
    if (memory && allot_cell_set_memory(cell, memory, memory) != ALLOT_OK)
        slurm_info("allot: %s: the cell gets no memory of its own (%s); Slurm's "
                   "limits still hold", what, allot_last_error());
    uint64_t id = 0;
    allot_cell_broker_id(cell, &id);
    if (allot_cell_ticket(cell, kept_ticket, sizeof kept_ticket) != ALLOT_OK)
        kept_ticket[0] = '\0';
    slurm_info("allot: %s runs in cell %llu (%s: min %u, max %u, weight %u%s%s)",
               what, (unsigned long long)id, name, spec.min, spec.max,
               spec.weight, spec.exclusive ? ", exclusive" : "", where);
    if (dir >= 0) {
        if (stale)
            unlinkat(dir, file, 0);
        keep_ticket(dir, file, what);
        close(dir);
    }
    return 0;
}

static void set_var(const char *name, const char *value, void *arg)
{
    spank_t sp = arg;
    if (spank_setenv(sp, name, value, 1) != ESPANK_SUCCESS)
        slurm_error("allot: cannot set %s for the step's tasks", name);
}

/* allot's Thread Composability Manager for the step's tasks, when the
 * operator named its directory, unless the user set TCM_ENABLE=0 (which
 * keeps oneTBB and Intel OpenMP on their own). A TCM_ENABLE=1 inherited
 * from a batch step is renewed with a permit table of this step's. */
static void give_tcm(spank_t sp)
{
    if (!conf.tcm[0])
        return;
    char value[16];
    if (spank_getenv(sp, "TCM_ENABLE", value, sizeof value) == ESPANK_SUCCESS &&
        atoi(value) == 0)
        return;
    char path[4096];
    const char *existing = NULL;
    if (spank_getenv(sp, "LD_LIBRARY_PATH", path, sizeof path) == ESPANK_SUCCESS &&
        path[0] != '\0')
        existing = path;
    /* Not twice: an srun inside a batch script inherits the directory. */
    size_t n = strlen(conf.tcm);
    if (existing && strncmp(existing, conf.tcm, n) == 0 &&
        (existing[n] == ':' || existing[n] == '\0'))
        existing = existing[n] == ':' && existing[n + 1] ? existing + n + 1 : NULL;
    spank_unsetenv(sp, "TCM_ENABLE");
    if (allot_cell_tcm_environment(cell, conf.tcm, existing, set_var, sp) != ALLOT_OK)
        slurm_error("allot: cannot give the step the thread composability manager (%s); "
                    "oneTBB and Intel OpenMP size themselves",
                    allot_last_error());
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (cell.id == 0) {
        /* Inherited from a shell in a cell (srun from a batch script that
         * had one): they would point the tasks at a page they do not
         * have. */
        spank_unsetenv(sp, "ALLOT_CELL");
        spank_unsetenv(sp, "ALLOT_GRANT_FD");
        return 0;
    }
    char preload[4096];
    const char *existing = NULL;
    if (spank_getenv(sp, "LD_PRELOAD", preload, sizeof preload) == ESPANK_SUCCESS &&
        preload[0] != '\0')
        existing = preload;
    /* Not twice: an srun inside a batch script inherits the shim already. */
    if (existing && conf.shim[0] && strncmp(existing, conf.shim, strlen(conf.shim)) == 0) {
        const char *rest = existing + strlen(conf.shim);
        existing = (*rest == ':' && rest[1]) ? rest + 1 : (*rest ? existing : NULL);
    }
    int rc = allot_cell_environment(cell, conf.shim[0] ? conf.shim : NULL,
                                    existing, set_var, sp);
    if (rc != ALLOT_OK)
        slurm_error("allot: cannot give the step its cell's environment (%s); "
                    "its runtimes size themselves as without allot",
                    allot_last_error());
    give_tcm(sp);
    return 0;
}

/* Under Slurm's cgroup/v2 plugins: the job's cell includes the step's
 * `user` group, where Slurm has just put the task (proctrack adds it
 * before this hook runs). Every task of a step is in the same group, so
 * it is asked for once per step; an allot failure leaves the task under
 * Slurm's CPUs alone, logged once. */
int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!slurm_cgroups || cell.id == 0 || !kept_ticket[0])
        return 0;
    pid_t pid = 0;
    char path[4096], rel[4096], mount[4096], group[8192];
    if (spank_get_item(sp, S_TASK_PID, &pid) != ESPANK_SUCCESS || pid <= 0 ||
        !v2_path_of(pid, path, sizeof path))
        return 0;
    if (!allot_slurm_user_group(path, rel, sizeof rel) || !v2_mount(mount, sizeof mount)) {
        if (!included[0])
            slurm_info("allot: task %d is in %s, not in a step's user group of Slurm's; "
                       "its CPUs stay Slurm's", (int)pid, path);
        snprintf(included, sizeof included, "-");
        return 0;
    }
    snprintf(group, sizeof group, "%s%s", mount, rel);
    if (strcmp(group, included) == 0)
        return 0;
    snprintf(included, sizeof included, "%s", group);
    if (allot_cell_include_group_at(conf.socket, kept_ticket, group) != ALLOT_OK)
        slurm_error("allot: the cell cannot include Slurm's cgroup %s (%s); the step's "
                    "tasks keep Slurm's CPUs", group, allot_last_error());
    else
        slurm_info("allot: the cell includes Slurm's cgroup %s", group);
    return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    /* A process of its own (slurmstepd spank epilog): slurm_spank_init
     * did not run in it. */
    parse_args(ac, av);
    uint32_t job = 0;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
        return 0;
    int dir = open_state();
    if (dir < 0)
        return 0;
    char file[32];
    snprintf(file, sizeof file, "job-%u", job);
    if (unlinkat(dir, file, 0) != 0 && errno != ENOENT)
        slurm_error("allot: job %u: cannot remove its ticket: %s", job, strerror(errno));
    close(dir);
    return 0;
}
