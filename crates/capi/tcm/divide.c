/*
 * divide.c: the division of a cell's threads among its permits. Part of
 * libtcm.so.1 (see tcm.c).
 *
 * The budget is the number of threads the cell's grant says its programs
 * should run (the grant page's `threads`). A permit's cost is its
 * concurrency plus `caller`: one more for a permit whose requester runs
 * beside the threads it asks for (a TBB arena asks for workers; the
 * thread that entered the arena works too), less for a team *nested* in
 * an arena (an OpenMP region started inside a TBB task): the TBB thread is
 * the team's primary, already counted, and so are the arena's threads the
 * arena lends the team (tcm_lent: threads that host no team while its
 * loop runs, which would otherwise wait).
 *
 * Each permit has a *target*: its share when nothing is fixed (rules 2
 * and 3 with rule 1 left out). Rules, in order:
 *
 *  1. A rigid permit that is running (`fixed`) keeps what it holds: an
 *     OpenMP team cannot change size inside a region. It is divided
 *     anew when it next becomes active (OpenMP activates its permit at
 *     each region's start, and idles it at the end).
 *  2. Every other permit gets its minimum, even beyond the budget: a
 *     minimum counts threads that exist already (an OpenMP primary
 *     thread, a TBB worker that starts a nested team), and refusing it
 *     would stop the program rather than keep a CPU free.
 *  3. What is left is handed out one thread at a time, highest priority
 *     first, and among equal priorities in turn in request order (the
 *     order of `c`), never past a permit's maximum, nor past its target.
 *     Nested teams come last, after every other permit is full: the
 *     arena's threads are their primaries, so an arena cut down to grow
 *     its own teams runs fewer of them (fewer items of its loop at once)
 *     with nothing gained; what the arena does not use reaches its teams
 *     as lent threads instead.
 *
 * The cap at the target is what makes permits converge to their shares:
 * without it, whoever is divided while the others are fixed keeps what
 * they left, and a split of the moment would last for ever.
 *
 * Invariants: min <= out[i] <= max for every unfixed claim; out[i] ==
 * held for a fixed one; the sum of costs exceeds the budget only by what
 * rules 1 and 2 force; the result depends only on the arguments, so
 * dividing again with nothing changed changes nothing (no renegotiation
 * churn).
 */

#include "divide.h"

/* Rules 2 and 3 (and 1 when `fixed_too`), growing claims up to `cap`. */
static void fill(uint32_t budget, const struct claim *c, size_t n, const uint32_t *cap,
                 int fixed_too, uint32_t *out)
{
    int64_t used = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = fixed_too && c[i].fixed ? c[i].held : c[i].min;
        used += (int64_t)out[i] + c[i].caller;
    }
    uint64_t left = used < (int64_t)budget ? (uint64_t)((int64_t)budget - used) : 0;
#define GROWS(i) (!(fixed_too && c[i].fixed) && out[i] < cap[i])
#define NESTED(i) (c[i].caller < 0)
    while (left > 0) {
        /* Among claims that can still grow: others before nested teams,
         * then the highest priority. */
        int found = 0, nested = 1;
        int32_t top = 0;
        for (size_t i = 0; i < n; i++)
            if (GROWS(i) && !NESTED(i))
                nested = 0;
        for (size_t i = 0; i < n; i++) {
            if (!GROWS(i) || NESTED(i) != nested)
                continue;
            if (!found || c[i].priority > top)
                top = c[i].priority;
            found = 1;
        }
        if (!found)
            break;
        /* One round at that rank, in request order. */
        for (size_t i = 0; i < n && left > 0; i++) {
            if (!GROWS(i) || NESTED(i) != nested || c[i].priority != top)
                continue;
            out[i]++;
            left--;
        }
    }
#undef NESTED
#undef GROWS
}

void tcm_divide(uint32_t budget, const struct claim *c, size_t n, uint32_t *out)
{
    uint32_t max[TCM_DIVIDE_MAX] = {0}, target[TCM_DIVIDE_MAX] = {0};
    if (n > TCM_DIVIDE_MAX)
        n = TCM_DIVIDE_MAX;
    for (size_t i = 0; i < n; i++)
        max[i] = c[i].max;
    fill(budget, c, n, max, 0, target);
    for (size_t i = 0; i < n; i++)
        if (target[i] < c[i].min)
            target[i] = c[i].min;
    fill(budget, c, n, target, 1, out);
}

uint32_t tcm_lent(uint32_t threads, uint32_t teams, uint32_t lent_out, uint32_t waiting)
{
    if (teams == 0 || teams >= threads || lent_out >= threads - teams)
        return 0;
    uint32_t idle = threads - teams;
    uint32_t by_rounds = idle / teams;
    uint32_t left = (idle - lent_out) / (waiting > 0 ? waiting : 1);
    return by_rounds < left ? by_rounds : left;
}
