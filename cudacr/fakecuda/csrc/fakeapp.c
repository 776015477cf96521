/*
 * fakeapp.c: fakecuda-app, a CUDA application for machines without a GPU.
 *
 * It dlopen()s "libcuda.so.1" (so /proc/PID/maps names libcuda, as a real
 * CUDA application's does), keeps a "device memory" buffer filled with a
 * pattern that it checks and advances on every tick, and prints
 *     tick N state=running sum=OK
 * N advances only while the driver state is running: a locked or
 * checkpointed process blocks in fakecuEnter, as real CUDA calls block.
 * A broken pattern prints sum=BAD and exits 3.
 *
 * It uses only ordinary memory and pipes, so CRIU can dump and restore it.
 *
 * Usage: fakecuda-app [interval_ms [buffer_kib [ticks]]]
 * Environment (overridden by arguments):
 *   FAKECUDA_INTERVAL_MS  tick interval, default 200
 *   FAKECUDA_BUFFER_KIB   device buffer size, default 1024
 *   FAKECUDA_TICKS        exit 0 after that many ticks, default 0 (never)
 *
 * Build: gcc -O2 -o fakecuda-app fakeapp.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct api {
	int (*init)(void);
	int (*alloc)(void **, size_t);
	void (*enter)(void);
	void (*leave)(void);
};

static long setting(int argc, char **argv, int i, const char *env, long def)
{
	const char *s = i < argc ? argv[i] : getenv(env);

	return s && *s ? atol(s) : def;
}

static void load(struct api *a)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);

	if (!h) {
		fprintf(stderr, "fakecuda-app: %s\n", dlerror());
		exit(2);
	}
	a->init = (int (*)(void))dlsym(h, "fakecuInit");
	a->alloc = (int (*)(void **, size_t))dlsym(h, "fakecuMemAlloc");
	a->enter = (void (*)(void))dlsym(h, "fakecuEnter");
	a->leave = (void (*)(void))dlsym(h, "fakecuLeave");
	if (!a->init || !a->alloc || !a->enter || !a->leave) {
		fprintf(stderr, "fakecuda-app: libcuda.so.1 is not the fake driver\n");
		exit(2);
	}
}

static uint64_t word(size_t i)
{
	return (uint64_t)i * 0x9e3779b97f4a7c15ULL ^ 0x5bd1e995ULL;
}

/* step checks that every word is word(i)+tick, then advances it to tick+1. */
static int step(uint64_t *buf, size_t n, uint64_t tick)
{
	int ok = 1;

	for (size_t i = 0; i < n; i++) {
		if (buf[i] != word(i) + tick)
			ok = 0;
		buf[i] = word(i) + tick + 1;
	}
	return ok;
}

static void nap(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts))
		;
}

int main(int argc, char **argv)
{
	long interval = setting(argc, argv, 1, "FAKECUDA_INTERVAL_MS", 200);
	long kib = setting(argc, argv, 2, "FAKECUDA_BUFFER_KIB", 1024);
	long ticks = setting(argc, argv, 3, "FAKECUDA_TICKS", 0);
	size_t n = (size_t)(kib > 0 ? kib : 1) * 1024 / sizeof(uint64_t);
	uint64_t *buf, tick = 0;
	struct api a;

	setvbuf(stdout, NULL, _IOLBF, 0);
	load(&a);
	if (a.init() || a.alloc((void **)&buf, n * sizeof(uint64_t))) {
		fprintf(stderr, "fakecuda-app: fake CUDA init failed\n");
		return 2;
	}
	for (size_t i = 0; i < n; i++)
		buf[i] = word(i);
	fprintf(stderr, "fakecuda-app pid=%d buffer=%ldKiB interval=%ldms\n", getpid(), kib, interval);
	for (;;) {
		a.enter();
		int ok = step(buf, n, tick);
		a.leave();
		if (!ok) {
			printf("tick %llu state=running sum=BAD\n", (unsigned long long)tick);
			return 3;
		}
		tick++;
		printf("tick %llu state=running sum=OK\n", (unsigned long long)tick);
		if (ticks > 0 && (long)tick >= ticks)
			return 0;
		nap(interval);
	}
}
