/*
 * Does a thread wake on time when its cgroup is frozen and thawed around
 * its wake-up time, and does it matter how it waits?
 *
 * A child pinned to CPU 1 runs a periodic loop: spin until B into each
 * period, then wait until the next period start, in one of three ways:
 *   sleep    clock_nanosleep(TIMER_ABSTIME) (a freezable sleep);
 *   timerfd  read() on a timerfd armed for the start (not freezable: a
 *            freeze interrupts it and the thread waits in the freezer);
 *   spin     read the clock until the start (never sleeps).
 * The parent freezes the child's cgroup B + CLOSE_LATE into every period
 * and thaws it THAW_EARLY before the next period start, as allot's
 * window driver does. It reports the child's lateness (woken - start)
 * and how many periods it woke more than half a period late (slept
 * through a window), and the same for a run without any freezing as the
 * control.
 *
 * Needs root and a freezer: cgroup v1 (/sys/fs/cgroup/freezer) or v2
 * (cgroup.freeze in a unified hierarchy). It makes one cgroup, moves
 * only its own child there, and removes both on exit.
 *
 *   gcc -O2 -o /tmp/fsr scripts/freezer-sleep-race.c
 *   /tmp/fsr v1|v2 SECONDS [sleep|timerfd|spin] [THAW_EARLY_US] [CLOSE_LATE_US]
 *
 * docs/time-mechanisms.md reports what it found.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PERIOD_NS 2000000LL
#define BUDGET_NS 600000LL
#define MAX_PERIODS 200000

static long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void sleep_until(long long ns)
{
	struct timespec t = { ns / 1000000000LL, ns % 1000000000LL };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
		;
}

enum wait { WAIT_SLEEP, WAIT_TIMERFD, WAIT_SPIN };

static void wait_until(enum wait how, long long ns)
{
	static int tfd = -1;
	if (how == WAIT_TIMERFD) {
		struct itimerspec it = { { 0, 0 }, { ns / 1000000000LL, ns % 1000000000LL } };
		unsigned long long n;
		if (tfd < 0)
			tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
		if (tfd >= 0 && timerfd_settime(tfd, TFD_TIMER_ABSTIME, &it, NULL) == 0) {
			while (read(tfd, &n, sizeof n) < 0 && errno == EINTR)
				;
			return;
		}
	}
	if (how != WAIT_SPIN)
		sleep_until(ns);
	while (now_ns() < ns)
		;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return (x > y) - (x < y);
}

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	sched_setaffinity(0, sizeof s, &s);
}

static int put(int fd, const char *word)
{
	return pwrite(fd, word, strlen(word), 0) < 0 ? -1 : 0;
}

/* The child: the periodic loop; lateness per period into `late`. */
static void periodic(enum wait how, long long start, long long end, long long *late)
{
	long long s = start;
	int k = 0;
	pin(1);
	sleep_until(s);
	while (s < end && k < MAX_PERIODS) {
		while (now_ns() < s + BUDGET_NS)
			;
		s += PERIOD_NS;
		wait_until(how, s);
		late[k++] = now_ns() - s;
	}
	late[MAX_PERIODS] = k;
	_exit(0);
}

/* One run; returns the number of periods slept through, -1 on error. */
static int run(int v2, int freeze, enum wait how, int secs, long long thaw_early,
	       long long close_late)
{
	char dir[128], path[192], pid[32];
	snprintf(dir, sizeof dir, "%s/freezer-sleep-race-%d",
		 v2 ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup/freezer", getpid());
	if (mkdir(dir, 0755) && errno != EEXIST) {
		perror(dir);
		return -1;
	}
	snprintf(path, sizeof path, "%s/%s", dir, v2 ? "cgroup.freeze" : "freezer.state");
	int gate = open(path, O_WRONLY);
	const char *thaw = v2 ? "0" : "THAWED", *frz = v2 ? "1" : "FROZEN";
	long long *late = mmap(NULL, (MAX_PERIODS + 1) * sizeof(long long),
			       PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (gate < 0 || late == MAP_FAILED) {
		perror(path);
		rmdir(dir);
		return -1;
	}
	long long start = (now_ns() / PERIOD_NS + 50) * PERIOD_NS;
	long long end = start + secs * 1000000000LL;
	pid_t child = fork();
	if (child == 0)
		periodic(how, start, end, late);
	snprintf(path, sizeof path, "%s/cgroup.procs", dir);
	int procs = open(path, O_WRONLY);
	snprintf(pid, sizeof pid, "%d", child);
	if (procs < 0 || put(procs, pid)) {
		perror(path);
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		rmdir(dir);
		return -1;
	}
	close(procs);

	/* The driver: sleep to 150 us before each edge, spin to it. */
	struct sched_param sp = { .sched_priority = 10 };
	sched_setscheduler(0, SCHED_FIFO, &sp);
	pin(0);
	for (long long s = start; s < end; s += PERIOD_NS) {
		long long open_at = s - thaw_early, close_at = s + BUDGET_NS + close_late;
		sleep_until(open_at - 150000);
		while (now_ns() < open_at)
			;
		if (freeze)
			put(gate, thaw);
		sleep_until(close_at - 150000);
		while (now_ns() < close_at)
			;
		if (freeze)
			put(gate, frz);
	}
	put(gate, thaw);
	sp.sched_priority = 0;
	sched_setscheduler(0, SCHED_OTHER, &sp);
	waitpid(child, NULL, 0);
	close(gate);
	rmdir(dir);

	int n = (int)late[MAX_PERIODS], through = 0;
	for (int i = 0; i < n; i++)
		if (late[i] > PERIOD_NS / 2)
			through++;
	qsort(late, n, sizeof *late, cmp_ll);
	printf("%-12s %6d periods, %4d slept through a window; lateness p50 %.0f p99 %.0f "
	       "max %.0f us\n",
	       freeze ? (v2 ? "v2 freezer" : "v1 freezer") : "no freezing", n, through,
	       n ? late[n / 2] / 1e3 : 0, n ? late[n * 99 / 100] / 1e3 : 0,
	       n ? late[n - 1] / 1e3 : 0);
	munmap(late, (MAX_PERIODS + 1) * sizeof(long long));
	return through;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 3 ? argv[3] : "sleep";
	enum wait how = !strcmp(mode, "timerfd") ? WAIT_TIMERFD
			: !strcmp(mode, "spin")  ? WAIT_SPIN
						 : WAIT_SLEEP;
	if (argc < 3 || (strcmp(argv[1], "v1") && strcmp(argv[1], "v2")) ||
	    (how == WAIT_SLEEP && strcmp(mode, "sleep"))) {
		fprintf(stderr,
			"usage: %s v1|v2 SECONDS [sleep|timerfd|spin] [THAW_EARLY_US] "
			"[CLOSE_LATE_US]\n",
			argv[0]);
		return 2;
	}
	int v2 = !strcmp(argv[1], "v2"), secs = atoi(argv[2]);
	long long thaw_early = (argc > 4 ? atoll(argv[4]) : 15) * 1000;
	long long close_late = (argc > 5 ? atoll(argv[5]) : 300) * 1000;
	printf("period %lld us, budget %lld us, waits with %s, thaw %lld us early, freeze %lld "
	       "us after the budget\n",
	       PERIOD_NS / 1000, BUDGET_NS / 1000, mode, thaw_early / 1000, close_late / 1000);
	if (run(v2, 0, how, secs, thaw_early, close_late) < 0 ||
	    run(v2, 1, how, secs, thaw_early, close_late) < 0)
		return 1;
	return 0;
}
