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
 * It uses only ordinary memory, pipes and (outside a checkpoint) device
 * nodes, so CRIU can dump and restore it.
 *
 * Usage: fakecuda-app [interval_ms [buffer_kib [ticks]]]
 * Environment (overridden by arguments):
 *   FAKECUDA_INTERVAL_MS  tick interval, default 200
 *   FAKECUDA_BUFFER_KIB   device buffer size, default 1024
 *   FAKECUDA_TICKS        exit 0 after that many ticks, default 0 (never)
 * More environment:
 *   FAKECUDA_SPREAD=1     spread the buffer evenly over all visible GPUs
 *                         (default: all of it on visible GPU 0)
 *   FAKECUDA_NCCL=1       behave as an NCCL rank: map "libnccl.so.2" (a
 *                         memfd), start NCCL's two threads and, unless
 *                         NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1 and
 *                         NCCL_CUMEM_ENABLE=0 keep NCCL on sockets, share
 *                         device memory through CUDA IPC
 * The fake driver reads CRYO_FAKE_GPUS(_FILE) and CUDA_VISIBLE_DEVICES here
 * to decide which GPUs the app sees; none: "no CUDA-capable device", exit 2.
 *
 * Build: gcc -O2 -o fakecuda-app fakeapp.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The threads of PyTorch's ProcessGroupNCCL, as a 2-rank job showed them on
 * driver 580 (NCCL 2.28 names none of its own): what cryo looks for. */
#define NCCL_SERVICE_THREAD "pt_nccl_watchdg"
#define NCCL_PROGRESS_THREAD "pt_nccl_heartbt"
/* What a rank's /proc/PID/maps shows of NCCL: the library's name. */
#define NCCL_LIBRARY "libnccl.so.2"

#define CUDA_ERROR_NO_DEVICE 100

struct api {
	int (*init)(void);
	int (*alloc)(void **, size_t);
	int (*spread)(void);
	void (*ipc)(void);
	const char *(*devices)(void);
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
	a->spread = (int (*)(void))dlsym(h, "fakecuMemSpread");
	a->ipc = (void (*)(void))dlsym(h, "fakecuIpcExport");
	a->devices = (const char *(*)(void))dlsym(h, "fakecuDeviceList");
	a->enter = (void (*)(void))dlsym(h, "fakecuEnter");
	a->leave = (void (*)(void))dlsym(h, "fakecuLeave");
	if (!a->init || !a->alloc || !a->spread || !a->ipc || !a->devices || !a->enter || !a->leave) {
		fprintf(stderr, "fakecuda-app: libcuda.so.1 is not the fake driver\n");
		exit(2);
	}
}

static int env_is(const char *name, const char *want)
{
	const char *v = getenv(name);

	return v && strcmp(v, want) == 0;
}

/* idle is the body of NCCL's threads: they exist, to be seen, and sleep. */
static void *idle(void *arg)
{
	(void)arg;
	for (;;)
		sleep(3600);
	return NULL;
}

static void start_thread(const char *name)
{
	pthread_t t;

	if (pthread_create(&t, NULL, idle, NULL)) {
		fprintf(stderr, "fakecuda-app: cannot start thread %s\n", name);
		exit(2);
	}
	pthread_setname_np(t, name);
	pthread_detach(t);
}

/*
 * map_nccl maps a page named like NCCL's library, so that /proc/PID/maps
 * names libnccl as a real rank's does (/memfd:libnccl.so.2): there is no
 * library to load. A memfd keeps the app dumpable by CRIU.
 */
static void map_nccl(void)
{
	int fd = memfd_create(NCCL_LIBRARY, MFD_CLOEXEC);

	if (fd < 0 || ftruncate(fd, 4096) ||
	    mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED) {
		fprintf(stderr, "fakecuda-app: cannot map %s\n", NCCL_LIBRARY);
		exit(2);
	}
	close(fd);
}

/*
 * nccl plays an NCCL rank after its communicator's init: NCCL is mapped, its
 * service and progress threads run, and unless the environment keeps NCCL
 * on sockets, its P2P/SHM/cuMem transports share device memory through
 * CUDA IPC.
 */
static void nccl(const struct api *a)
{
	map_nccl();
	start_thread(NCCL_SERVICE_THREAD);
	start_thread(NCCL_PROGRESS_THREAD);
	if (!(env_is("NCCL_P2P_DISABLE", "1") && env_is("NCCL_SHM_DISABLE", "1") &&
	      env_is("NCCL_CUMEM_ENABLE", "0")))
		a->ipc();
}

/* init initialises the fake CUDA and allocates the device buffer. */
static uint64_t *init(const struct api *a, size_t bytes)
{
	uint64_t *buf;
	int r = a->init();

	if (r == CUDA_ERROR_NO_DEVICE) {
		fprintf(stderr, "fakecuda-app: no CUDA-capable device is detected\n");
		exit(2);
	}
	if (r || a->alloc((void **)&buf, bytes) || (env_is("FAKECUDA_SPREAD", "1") && a->spread())) {
		fprintf(stderr, "fakecuda-app: fake CUDA init failed\n");
		exit(2);
	}
	if (env_is("FAKECUDA_NCCL", "1"))
		nccl(a);
	return buf;
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
	buf = init(&a, n * sizeof(uint64_t));
	for (size_t i = 0; i < n; i++)
		buf[i] = word(i);
	fprintf(stderr, "fakecuda-app pid=%d buffer=%ldKiB interval=%ldms gpus=%s\n", getpid(), kib, interval, a.devices());
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
