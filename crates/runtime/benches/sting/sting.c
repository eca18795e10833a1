/* The Sting benchmark's algorithms for OpenMP tasks, the same algorithms
 * as abisort.rs, queens.rs and knapsack.rs (see those for the reasoning).
 *
 *   sting-omp abisort LOG2N RUNS | queens N RUNS | knapsack ITEMS RUNS
 *
 * Prints one line per run: "<nanoseconds> <answer> <nodes>" (nodes: the
 * knapsack's nodes expanded, 0 otherwise). The answer is the checksum of
 * the sorted keys (0 if they are not sorted), the number of solutions, or
 * the knapsack's optimum. Compiled by benches/sting.rs with
 * gcc -O2 -fopenmp; the team size is OMP_NUM_THREADS. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ---- adaptive bitonic sort --------------------------------------------- */

#define CUTOFF 2048

/* A key in the high half, its input position in the low half: all keys
 * distinct (abisort.rs, "Why it is adaptive"). */
struct node {
    uint64_t key;
    struct node *left, *right;
};

static int out_of_order(uint64_t a, uint64_t b, int up) { return up ? a > b : a < b; }

static void swap_key(uint64_t *a, uint64_t *b) {
    uint64_t t = *a;
    *a = *b;
    *b = t;
}

static void swap_tree(struct node **a, struct node **b) {
    struct node *t = *a;
    *a = *b;
    *b = t;
}

/* The complete tree of keys[0..n) (n = 2^j - 1) in order; nodes from pool. */
static struct node *build(const uint64_t *keys, size_t n, struct node **pool) {
    if (n == 0) return NULL;
    struct node *x = (*pool)++;
    x->key = keys[n / 2];
    x->left = build(keys, n / 2, pool);
    x->right = build(keys + n / 2 + 1, n / 2, pool);
    return x;
}

static void in_order(const struct node *x, uint32_t *out, size_t *at) {
    if (!x) return;
    in_order(x->left, out, at);
    out[(*at)++] = (uint32_t)(x->key >> 32);
    in_order(x->right, out, at);
}

static void swap_run(struct node *a, struct node *b, int swap_right, int up) {
    while (a) {
        int swap = out_of_order(a->key, b->key, up);
        if (swap) {
            swap_key(&a->key, &b->key);
            if (swap_right)
                swap_tree(&a->right, &b->right);
            else
                swap_tree(&a->left, &b->left);
        }
        if (swap == swap_right) {
            a = a->left;
            b = b->left;
        } else {
            a = a->right;
            b = b->right;
        }
    }
}

static uint64_t merge(struct node *root, uint64_t spare, size_t n, int up) {
    int swap_right = out_of_order(root->key, spare, up);
    if (swap_right) swap_key(&root->key, &spare);
    if (!root->left) return spare;
    swap_run(root->left, root->right, swap_right, up);
    uint64_t k = root->key;
    if (n > CUTOFF) {
#pragma omp task shared(k)
        k = merge(root->left, k, n / 2, up);
        spare = merge(root->right, spare, n / 2, up);
#pragma omp taskwait
    } else {
        k = merge(root->left, k, n / 2, up);
        spare = merge(root->right, spare, n / 2, up);
    }
    root->key = k;
    return spare;
}

static uint64_t sort_dir(struct node *root, uint64_t spare, size_t n, int up) {
    if (!root->left) {
        if (out_of_order(root->key, spare, up)) swap_key(&root->key, &spare);
        return spare;
    }
    uint64_t k = root->key;
    if (n > CUTOFF) {
#pragma omp task shared(k)
        k = sort_dir(root->left, k, n / 2, up);
        spare = sort_dir(root->right, spare, n / 2, !up);
#pragma omp taskwait
    } else {
        k = sort_dir(root->left, k, n / 2, up);
        spare = sort_dir(root->right, spare, n / 2, !up);
    }
    root->key = k;
    return merge(root, spare, n, up);
}

static uint64_t run_abisort(unsigned log2n, uint64_t *nodes) {
    size_t n = (size_t)1 << log2n;
    uint64_t *keys = malloc(n * sizeof *keys);
    struct node *pool = malloc(n * sizeof *pool), *next = pool;
    uint32_t *a = malloc(n * sizeof *a);
    if (!keys || !pool || !a) {
        fprintf(stderr, "sting-omp: out of memory for 2^%u keys\n", log2n);
        exit(1);
    }
    uint64_t s = 1;
    for (size_t i = 0; i < n; i++) keys[i] = ((splitmix64(&s) >> 32) << 32) | i;
    struct node *root = build(keys, n - 1, &next);
    uint64_t spare = keys[n - 1];
    uint64_t t0 = now_ns();
    if (root) {
#pragma omp parallel
#pragma omp single
        spare = sort_dir(root, spare, n, 1);
    }
    uint64_t t = now_ns() - t0;
    size_t at = 0;
    in_order(root, a, &at);
    a[at] = (uint32_t)(spare >> 32);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && a[i - 1] > a[i]) { sum = 0; break; }
        sum += (uint64_t)(i + 1) * ((uint64_t)a[i] + 1);
    }
    free(a);
    free(pool);
    free(keys);
    *nodes = sum;
    return t;
}

/* ---- N-queens ---------------------------------------------------------- */

#define FORK_ROWS 3

static uint64_t rows_seq(uint32_t all, uint32_t cols, uint32_t d1, uint32_t d2) {
    if (cols == all) return 1;
    uint32_t free_ = all & ~(cols | d1 | d2);
    uint64_t total = 0;
    while (free_) {
        uint32_t bit = free_ & -free_;
        free_ &= ~bit;
        total += rows_seq(all, cols | bit, ((d1 | bit) << 1) & all, (d2 | bit) >> 1);
    }
    return total;
}

static uint64_t split(unsigned n, uint32_t free_, uint32_t cols, uint32_t d1, uint32_t d2, unsigned row);

static uint64_t rows(unsigned n, uint32_t cols, uint32_t d1, uint32_t d2, unsigned row) {
    uint32_t all = (1u << n) - 1;
    if (cols == all) return 1;
    uint32_t free_ = all & ~(cols | d1 | d2);
    if (row >= FORK_ROWS) return rows_seq(all, cols, d1, d2);
    return split(n, free_, cols, d1, d2, row);
}

static uint64_t split(unsigned n, uint32_t free_, uint32_t cols, uint32_t d1, uint32_t d2, unsigned row) {
    int k = __builtin_popcount(free_);
    if (k == 0) return 0;
    if (k == 1) return rows(n, cols | free_, (d1 | free_) << 1, (d2 | free_) >> 1, row + 1);
    uint32_t left = 0, rest = free_;
    for (int i = 0; i < k / 2; i++) {
        uint32_t bit = rest & -rest;
        left |= bit;
        rest &= ~bit;
    }
    uint64_t a, b;
#pragma omp task shared(a)
    a = split(n, left, cols, d1, d2, row);
    b = split(n, rest, cols, d1, d2, row);
#pragma omp taskwait
    return a + b;
}

static uint64_t run_queens(unsigned n, uint64_t *answer) {
    uint64_t t0 = now_ns();
#pragma omp parallel
#pragma omp single
    *answer = rows(n, 0, 0, 0, 0);
    return now_ns() - t0;
}

/* ---- branch-and-bound knapsack ----------------------------------------- */

#define SPAWN_DEPTH 14

typedef struct { uint64_t w, v; size_t idx; } item;
static uint64_t *kw, *kv, kcap;
static size_t kn;
static uint64_t kbest, knodes;

static int by_ratio(const void *pa, const void *pb) {
    const item *a = pa, *b = pb;
    uint64_t l = b->v * a->w, r = a->v * b->w;
    if (l != r) return l < r ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static uint64_t bound(size_t i, uint64_t w, uint64_t v) {
    while (i < kn && w + kw[i] <= kcap) { w += kw[i]; v += kv[i]; i++; }
    if (i < kn) v += kv[i] * (kcap - w) / kw[i];
    return v;
}

static void offer(uint64_t v) {
    uint64_t cur = __atomic_load_n(&kbest, __ATOMIC_RELAXED);
    while (v > cur && !__atomic_compare_exchange_n(&kbest, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static int priority_of(unsigned disc) { return disc == 0 ? 2 : disc <= 2 ? 1 : 0; }

/* Tasks spawned and not finished; below the team's size a depth-first
 * task gives its shallowest open branch away (knapsack.rs, "Splitting by
 * demand"). */
static size_t kpending;
static size_t kteam;

#define NO_BRANCH UINT32_MAX

/* The leave-it branch open at one item of a task's path. */
typedef struct { uint64_t w, v; uint32_t disc; } open_branch;

static void spawn_node(size_t i, uint64_t w, uint64_t v, unsigned disc);

static void donate(open_branch *open) {
    for (size_t i = 0; i <= kn; i++) {
        if (open[i].disc != NO_BRANCH) {
            open_branch g = open[i];
            open[i].disc = NO_BRANCH;
            spawn_node(i + 1, g.w, g.v, g.disc);
            return;
        }
    }
}

static void visit(size_t i, uint64_t w, uint64_t v, unsigned disc, open_branch *open,
                  uint64_t *nodes) {
    ++*nodes;
    offer(v);
    if (i == kn || bound(i, w, v) <= __atomic_load_n(&kbest, __ATOMIC_RELAXED)) return;
    if (w + kw[i] > kcap) {
        visit(i + 1, w, v, disc, open, nodes);
        return;
    }
    open[i] = (open_branch){w, v, disc + 1};
    if (__atomic_load_n(&kpending, __ATOMIC_RELAXED) < kteam) donate(open);
    visit(i + 1, w + kw[i], v + kv[i], disc, open, nodes);
    open_branch leave = open[i];
    open[i].disc = NO_BRANCH;
    if (leave.disc != NO_BRANCH) visit(i + 1, leave.w, leave.v, leave.disc, open, nodes);
}

static void expand(size_t i, uint64_t w, uint64_t v, unsigned disc) {
    uint64_t nodes = 0;
    if (i >= SPAWN_DEPTH) {
        open_branch *open = malloc((kn + 1) * sizeof *open);
        if (!open) {
            fprintf(stderr, "sting-omp: out of memory\n");
            exit(1);
        }
        for (size_t k = 0; k <= kn; k++) open[k].disc = NO_BRANCH;
        visit(i, w, v, disc, open, &nodes);
        free(open);
    } else {
        nodes = 1;
        offer(v);
        if (i < kn && bound(i, w, v) > __atomic_load_n(&kbest, __ATOMIC_RELAXED)) {
            int fits = w + kw[i] <= kcap;
            spawn_node(i + 1, w, v, disc + (unsigned)fits);
            if (fits) spawn_node(i + 1, w + kw[i], v + kv[i], disc);
        }
    }
    __atomic_fetch_add(&knodes, nodes, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&kpending, 1, __ATOMIC_SEQ_CST);
}

static void spawn_node(size_t i, uint64_t w, uint64_t v, unsigned disc) {
    __atomic_fetch_add(&kpending, 1, __ATOMIC_SEQ_CST);
#pragma omp task priority(priority_of(disc))
    expand(i, w, v, disc);
}

static uint64_t run_knapsack(size_t n, uint64_t *answer, uint64_t *nodes) {
    item *it = malloc(n * sizeof *it);
    uint64_t s = 7, total = 0;
    for (size_t i = 0; i < n; i++) {
        it[i].w = 1 + splitmix64(&s) % 1000;
        it[i].v = it[i].w + 100;
        it[i].idx = i;
    }
    qsort(it, n, sizeof *it, by_ratio);
    kw = malloc(n * sizeof *kw);
    kv = malloc(n * sizeof *kv);
    for (size_t i = 0; i < n; i++) { kw[i] = it[i].w; kv[i] = it[i].v; total += it[i].w; }
    kn = n;
    kcap = total / 2;
    kbest = 0;
    knodes = 0;
    uint64_t t0 = now_ns();
#pragma omp parallel
#pragma omp single
    {
        kteam = (size_t)omp_get_num_threads();
        kpending = 1;
        expand(0, 0, 0, 0);
    }
    uint64_t t = now_ns() - t0;
    *answer = kbest;
    *nodes = knodes;
    free(it); free(kw); free(kv);
    return t;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "workers") == 0) {
        printf("%d\n", omp_get_max_threads());
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s abisort|queens|knapsack SIZE RUNS\n", argv[0]);
        return 2;
    }
    unsigned size = (unsigned)atoi(argv[2]);
    int runs = atoi(argv[3]);
    for (int r = 0; r < runs; r++) {
        uint64_t answer = 0, nodes = 0, t;
        if (strcmp(argv[1], "abisort") == 0) t = run_abisort(size, &answer);
        else if (strcmp(argv[1], "queens") == 0) t = run_queens(size, &answer);
        else if (strcmp(argv[1], "knapsack") == 0) t = run_knapsack(size, &answer, &nodes);
        else { fprintf(stderr, "unknown benchmark %s\n", argv[1]); return 2; }
        printf("%llu %llu %llu\n", (unsigned long long)t, (unsigned long long)answer, (unsigned long long)nodes);
        fflush(stdout);
    }
    return 0;
}
