/*
 * Where a woken thread runs decides what a cold wake-up costs.
 *
 * A helper thread waits on a condition variable; the caller (pinned to
 * CPU 0) sleeps 300 us so that everyone is idle, signals, and spins until
 * the helper has answered. The helper is either free to run anywhere
 * (HELPER = -1), or pinned to the caller's CPU (0), or to the other one
 * (1). Prints the median and p99 round trip and where the helper ran.
 *
 *   gcc -O2 -pthread -o /tmp/wake-placement scripts/wake-placement.c
 *   for h in -1 0 1; do /tmp/wake-placement $h; done
 *
 * Needs two CPUs (0 and 1). See crates/runtime/BENCHMARKS.md, "Wake-up".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { SAMPLES = 1000, IDLE_US = 300 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ring = PTHREAD_COND_INITIALIZER;
static long asked;
static atomic_long answered;
static atomic_int helper_ran_on;
static int helper_cpu;

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Restricts the calling thread to `cpu`, or to CPUs 0 and 1 for -1. */
static void restrict_to(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	if (cpu < 0) {
		CPU_SET(0, &set);
		CPU_SET(1, &set);
	} else {
		CPU_SET(cpu, &set);
	}
	if (sched_setaffinity(0, sizeof set, &set) != 0) {
		perror("sched_setaffinity (two CPUs, 0 and 1, are needed)");
		exit(1);
	}
}

static void *helper(void *unused)
{
	long seen = 0;
	(void)unused;
	restrict_to(helper_cpu);
	pthread_mutex_lock(&lock);
	for (;;) {
		while (asked == seen)
			pthread_cond_wait(&ring, &lock);
		seen = asked;
		atomic_store(&helper_ran_on, sched_getcpu());
		atomic_fetch_add(&answered, 1);
	}
	return NULL;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	static double took[SAMPLES];
	int on_caller_cpu = 0;
	pthread_t t;

	if (argc != 2) {
		fprintf(stderr, "usage: %s HELPER_CPU   (-1: anywhere, 0: the caller's, 1: the other)\n",
			argv[0]);
		return 2;
	}
	helper_cpu = atoi(argv[1]);
	restrict_to(0);
	pthread_create(&t, NULL, helper, NULL);
	usleep(10000);
	for (int i = 0; i < SAMPLES; i++) {
		long want = atomic_load(&answered) + 1;
		double start;
		usleep(IDLE_US);
		start = now_us();
		pthread_mutex_lock(&lock);
		asked++;
		pthread_cond_signal(&ring);
		pthread_mutex_unlock(&lock);
		while (atomic_load(&answered) != want)
			;
		took[i] = now_us() - start;
		on_caller_cpu += atomic_load(&helper_ran_on) == 0;
	}
	qsort(took, SAMPLES, sizeof took[0], by_value);
	printf("helper %2d: median %.1f us, p99 %.1f us, ran on the caller's CPU %d of %d\n",
	       helper_cpu, took[SAMPLES / 2], took[SAMPLES * 99 / 100], on_caller_cpu, SAMPLES);
	return 0;
}
