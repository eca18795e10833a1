/* Unit test of the step-to-cell mapping (slurm/step_spec.h). Built and
 * run by scripts/test-slurm.sh; exits nonzero on the first mismatch. */
#include "step_spec.h"
#include <stdio.h>
#include <string.h>

static int failures;

static void expect(const char *what, allot_spec_t got, uint32_t min,
                   uint32_t max, uint32_t weight, int exclusive)
{
    if (got.min != min || got.max != max || got.weight != weight ||
        got.exclusive != exclusive) {
        fprintf(stderr,
                "%s: got min %u max %u weight %u exclusive %d, "
                "want %u %u %u %d\n",
                what, got.min, got.max, got.weight, got.exclusive, min, max,
                weight, exclusive);
        failures++;
    }
}

int main(void)
{
    struct allot_slurm_step s = {2, ALLOT_SLURM_DEFAULT, 1};
    expect("default, borrowing", allot_slurm_step_spec(s), 2, 0, 2, 0);
    s.borrow = 0;
    expect("default, not borrowing", allot_slurm_step_spec(s), 2, 2, 2, 0);
    s.sharing = ALLOT_SLURM_OVERSUBSCRIBE;
    s.borrow = 1;
    expect("oversubscribe", allot_slurm_step_spec(s), 0, 0, 2, 0);
    s.sharing = ALLOT_SLURM_EXCLUSIVE;
    s.cpus = 64;
    expect("exclusive", allot_slurm_step_spec(s), 64, 64, 64, 1);
    expect("exclusive, refused", allot_slurm_best_effort(allot_slurm_step_spec(s)),
           0, 64, 64, 0);
    s.sharing = ALLOT_SLURM_DEFAULT;
    s.cpus = 0;
    expect("no CPUs known", allot_slurm_step_spec(s), 1, 0, 1, 0);
    s.cpus = 20000;
    expect("weight capped", allot_slurm_step_spec(s), 20000, 0, 10000, 0);
    if (allot_slurm_step_memory(2048, 0, 4) != (2048ull << 20) ||
        allot_slurm_step_memory(512, 1, 4) != (2048ull << 20) ||
        allot_slurm_step_memory(512, 1, 0) != (512ull << 20) ||
        allot_slurm_step_memory(0, 0, 4) != 0 ||
        allot_slurm_step_memory(UINT64_MAX >> 1, 1, 64) != 0) {
        fprintf(stderr, "memory: --mem and --mem-per-cpu map wrongly\n");
        failures++;
    }
    char group[64];
    const char *task = "/system.slice/slurmstepd.scope/job_42/step_0/user/task_1";
    if (!allot_slurm_user_group(task, group, sizeof group) ||
        strcmp(group, "/system.slice/slurmstepd.scope/job_42/step_0/user") != 0) {
        fprintf(stderr, "user group: %s gave %s\n", task, group);
        failures++;
    }
    if (!allot_slurm_user_group("/slurm/job_7/step_batch/user\n", group, sizeof group) ||
        strcmp(group, "/slurm/job_7/step_batch/user") != 0) {
        fprintf(stderr, "user group: a batch step's own user group gave %s\n", group);
        failures++;
    }
    const char *none[] = {"/system.slice/slurmstepd.scope/job_42/step_0/slurm",
                          "/user/task_1", "/job_42/user/task_1", "/", ""};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        if (allot_slurm_user_group(none[i], group, sizeof group)) {
            fprintf(stderr, "user group: %s is none, got %s\n", none[i], group);
            failures++;
        }
    if (allot_slurm_user_group(task, group, 10)) {
        fprintf(stderr, "user group: a group longer than the buffer was copied\n");
        failures++;
    }
    if (!allot_slurm_owns_cgroups("/system.slice/slurmstepd.scope/system") ||
        !allot_slurm_owns_cgroups("/slurm/job_7/step_0/slurm") ||
        allot_slurm_owns_cgroups("/system.slice/slurmd.service") ||
        allot_slurm_owns_cgroups("/")) {
        fprintf(stderr, "owns cgroups: Slurm's cgroup/v2 layout misread\n");
        failures++;
    }
    if (failures == 0)
        printf("step_spec: 12 cases passed\n");
    return failures != 0;
}
