/*
 * filltree: a process tree whose every process has several threads and a
 * large filled private region, for CRIU's parallel fill (contrib/criu):
 * the restore's fill threads must restore every byte, and must leave every
 * pid and thread id as it was.
 *
 * The first process forks PROCS - 1 children. Each process I fills MIB + 2*I
 * MiB with a pseudo-random stream from its own seed and starts THREADS - 1
 * threads that sleep. (Regions of one size at one address in a parent and
 * its child would be restored as copy-on-write ones, which CRIU fills
 * before its restorer runs: the sizes differ so that each process's region
 * is its own, as a GPU process's memory is.) Then each checks its whole region against the stream
 * again and again, printing after each pass
 *   proc I pid P tids T1,T2,... pass N ok|BAD
 * where the pids and tids are those seen inside its pid namespace.
 *
 * Usage: filltree MIB PROCS THREADS
 * Build: gcc -O2 -static -pthread -o filltree filltree.c
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MIB (1UL << 20)
#define MAX_THREADS 64

static pid_t tids[MAX_THREADS];
static int nthreads;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *sleeper(void *arg)
{
	pthread_mutex_lock(&mu);
	tids[nthreads++] = (pid_t)syscall(SYS_gettid);
	pthread_mutex_unlock(&mu);
	for (;;)
		pause();
	return arg;
}

/* check compares the region with the stream from seed: 1 when equal. */
static int check(const uint64_t *w, size_t words, uint64_t seed)
{
	for (size_t i = 0; i < words; i++)
		if (w[i] != next(&seed))
			return 0;
	return 1;
}

static void run(int idx, size_t len, int threads)
{
	uint64_t seed = 88172645463325252ULL + 7919ULL * idx, s = seed;
	size_t words = len / 8;
	uint64_t *w;
	char list[MAX_THREADS * 12];
	pthread_t th;

	w = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w == MAP_FAILED) {
		perror("filltree: mmap");
		exit(1);
	}
	for (size_t i = 0; i < words; i++)
		w[i] = next(&s);
	tids[nthreads++] = (pid_t)syscall(SYS_gettid);
	for (int i = 1; i < threads; i++)
		if (pthread_create(&th, NULL, sleeper, NULL)) {
			fprintf(stderr, "filltree: pthread_create failed\n");
			exit(1);
		}
	while (__atomic_load_n(&nthreads, __ATOMIC_SEQ_CST) < threads)
		usleep(1000);
	list[0] = '\0';
	for (int i = 0; i < threads; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d", i ? "," : "", tids[i]);
	for (unsigned long pass = 1;; pass++) {
		int ok = check(w, words, seed);

		printf("proc %d pid %d tids %s pass %lu %s\n", idx, getpid(), list, pass, ok ? "ok" : "BAD");
		fflush(stdout);
		usleep(100000);
	}
}

int main(int argc, char **argv)
{
	int procs, threads;
	size_t len;

	if (argc != 4) {
		fprintf(stderr, "usage: filltree MIB PROCS THREADS\n");
		return 2;
	}
	len = strtoul(argv[1], NULL, 10) * MIB;
	procs = atoi(argv[2]);
	threads = atoi(argv[3]);
	if (procs < 1 || threads < 1 || threads > MAX_THREADS) {
		fprintf(stderr, "filltree: PROCS >= 1 and 1 <= THREADS <= %d\n", MAX_THREADS);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < procs; i++)
		if (fork() == 0) {
			run(i, len + 2 * i * MIB, threads);
			return 0;
		}
	run(0, len, threads);
	return 0;
}
