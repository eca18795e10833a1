// allot::require_scope and the require macros from C++. Run by
// tests/c_require.rs; prints "ok c++".
#include <allot.h>
#include <sched.h>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#define CHECK(c)                                                                   \
    do {                                                                           \
        if (!(c)) {                                                                \
            std::fprintf(stderr, "require.cpp:%d: %s (%s)\n", __LINE__, #c,        \
                         allot_last_error());                                      \
            std::exit(1);                                                          \
        }                                                                          \
    } while (0)

static int ncpus() {
    cpu_set_t s;
    CHECK(sched_getaffinity(0, sizeof s, &s) == 0);
    return CPU_COUNT(&s);
}

static int all;

static int early_return() {
    allot::require_scope s{allot_cores(1)};
    CHECK(ncpus() == 1);
    return 3;
}

int main() {
    all = ncpus();
    {
        allot_outcome_t c;
        allot::require_scope s{&c, {allot_cores(1)}};
        CHECK(s.entered() && c.ncores == 1 && ncpus() == 1);
    }
    CHECK(ncpus() == all);
    CHECK(early_return() == 3);
    CHECK(ncpus() == all);
    try {
        allot::require_scope s{allot_cores(1)};
        CHECK(ncpus() == 1);
        throw std::runtime_error("leave by exception");
    } catch (const std::runtime_error &) {
    }
    CHECK(ncpus() == all);
    int rc = -1;
    {
        allot::require_scope s{{allot_kind("gpu", 0, 1.0)}, &rc};
        CHECK(!s.entered() && rc == ALLOT_ERR_UNKNOWN);
    }
    allot_outcome_t c;
    allot_require(&c, allot_cores(1)) {
        CHECK(c.ncores == 1 && ncpus() == 1);
    }
    allot_require_try(&rc, allot_named_policy("nope", nullptr)) { CHECK(false); }
    CHECK(rc == ALLOT_ERR_UNKNOWN);
    CHECK(ncpus() == all);
    std::printf("ok c++\n");
    return 0;
}
