/* Unit test of the step-to-cell mapping (slurm/step_spec.h). Built and
 * run by scripts/test-slurm.sh; exits nonzero on the first mismatch. */
#include "step_spec.h"
#include <stdio.h>

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
    if (failures == 0)
        printf("step_spec: 8 cases passed\n");
    return failures != 0;
}
