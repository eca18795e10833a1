/* Poli-C's spelling through ALLOT_SHORT_NAMES, and the header under
 * -pedantic. Run by tests/c_require.rs; prints "ok short". */
#define _GNU_SOURCE
#define ALLOT_SHORT_NAMES
#include <allot.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c)                                                                   \
    do {                                                                           \
        if (!(c)) {                                                                \
            fprintf(stderr, "require_short.c:%d: %s (%s)\n", __LINE__, #c,         \
                    allot_last_error());                                           \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static int ncpus(void)
{
    cpu_set_t s;
    CHECK(sched_getaffinity(0, sizeof s, &s) == 0);
    return CPU_COUNT(&s);
}

static int mine(allot_view_t *view, void *arg)
{
    (void)arg;
    int got = 0;
    dev_iter(view, "cpu", d) {
        allot_dev_request(d, got == 0 && allot_dev_available(d) >= 1 ? 1.0 : 0.0);
        got += allot_dev_available(d) >= 1;
    }
    return got > 0 ? ALLOT_POLICY_SUCCESS : ALLOT_POLICY_FAILURE;
}

int main(void)
{
    int all = ncpus();
    allot_outcome_t c;
    require(&c, cores(1)) {
        CHECK(c.ncores == 1 && ncpus() == 1);
    }
    CHECK(ncpus() == all);
    require(BeforeSpawn(cores(1))) {
        CHECK(ncpus() == all); /* no thread created: nothing taken */
        require(AfterSpawn(Private(cores(1))), ForChild(cores(1)), ForDescendants(Shared(cpu(0, 1.0)))) {
        }
    }
    require(policy("mine", mine, NULL)) {
        CHECK(ncpus() == 1);
    }
    int rc;
    require_try(&rc, kind("NoSuchKind", 0, 1.0)) {
        CHECK(0);
    }
    CHECK(rc == ALLOT_ERR_UNKNOWN);
    require(Default(cpu(0, 1.0))) {
    }
    require(Shared(min_cores(1))) {
        CHECK(ncpus() == all);
    }
    require(memory(0, 4096.0)) {
    }
    require_try(&rc, io("8:0", 500.0)) {
    }
    CHECK(rc == ALLOT_OK || rc == ALLOT_ERR_UNKNOWN);
    printf("ok short\n");
    return 0;
}
