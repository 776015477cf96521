/*
 * fakecuda.c: a fake libcuda.so.1 for machines without a GPU.
 *
 * It exports the driver's checkpoint API with the real signatures and
 * state machine (running -> lock -> locked -> checkpoint -> checkpointed ->
 * restore -> locked -> unlock -> running). The state itself lives in the
 * target process (see fakecuda.h), so the fake behaves across CRIU dumps,
 * restores and pid changes the way the real driver does.
 *
 * Build:  gcc -shared -fPIC -O2 -o libcuda.so.1 fakecuda.c
 * Build a driver older than the checkpoint API (no cuCheckpoint* symbols):
 *         gcc -shared -fPIC -O2 -DFAKECU_NO_CHECKPOINT -o libcuda.so.1 fakecuda.c
 *
 * Environment of the driver's caller (cryo's helper):
 *   CRYO_FAKE_CUDA_VERSION  cuDriverGetVersion's answer (default 13000, or
 *                           12020 without the checkpoint API)
 *   CRYO_FAKE_CUDA_FAULTS   directory of fault files, see faults.c
 *   CRYO_FAKE_GPUS(_FILE)   the restoring host's GPUs (gpus.h): a restore
 *                           moves a process only onto GPUs listed there
 * Environment of the application (read by fakecuInit):
 *   CRYO_FAKE_GPUS(_FILE)   the host's GPUs, to tie /dev/nvidia<minor> to GPUs
 *   CUDA_VISIBLE_DEVICES    as CUDA applies it (devices.c)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"
#include "gpus.h"

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_OPERATING_SYSTEM = 304,
	CUDA_ERROR_ILLEGAL_STATE = 401,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_TIMEOUT = 909,
	CUDA_ERROR_UNKNOWN = 999,
};

static const struct {
	int code;
	const char *name;
	const char *text;
} errtab[] = {
	{CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
	{CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
	{CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	{CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{CUDA_ERROR_TIMEOUT, "CUDA_ERROR_TIMEOUT", "the wait operation has timed out"},
	{CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

EXPORT CUresult cuGetErrorName(CUresult err, const char **p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(errtab) / sizeof(errtab[0]); i++)
		if (errtab[i].code == err) {
			*p = errtab[i].name;
			return CUDA_SUCCESS;
		}
	*p = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult err, const char **p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(errtab) / sizeof(errtab[0]); i++)
		if (errtab[i].code == err) {
			*p = errtab[i].text;
			return CUDA_SUCCESS;
		}
	*p = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	const char *s = getenv("CRYO_FAKE_CUDA_VERSION");
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
#ifdef FAKECU_NO_CHECKPOINT
	*v = 12020;
#else
	*v = 13000;
#endif
	if (s && *s)
		*v = atoi(s);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned int flags)
{
	(void)flags;
	return CUDA_SUCCESS;
}

/* ---- Entry points of the application side (its own process). ---- */

#include "devices.c"

static struct fakecu_page *self_page(void)
{
	return (struct fakecu_page *)(uintptr_t)FAKECU_PAGE_ADDR;
}

static int initialized;

/*
 * fakecuInit is the fake's cuInit in the application: it decides which GPUs
 * the process sees (devices.c), maps the state page, records them there
 * and starts the device thread. No visible GPU is CUDA_ERROR_NO_DEVICE, and
 * the process then has no CUDA state at all, as with the real driver. A
 * second call is a no-op.
 */
EXPORT int fakecuInit(void)
{
	struct fakecu_page *p = self_page();
	void *got;

	if (initialized)
		return CUDA_SUCCESS;
	if (discover() == 0) {
		close_devices();
		return CUDA_ERROR_NO_DEVICE;
	}
	got = mmap(p, FAKECU_PAGE_SIZE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (got != (void *)p) {
		fprintf(stderr, "fakecuda: cannot map state page at %#llx: %s\n",
			FAKECU_PAGE_ADDR, strerror(errno));
		close_devices();
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	p->layout = FAKECU_LAYOUT;
	p->state = FAKECU_RUNNING;
	p->init_pid = (uint64_t)getpid();
	record_gpus(p);
	if (start_device_thread(p) || start_touch_thread(p)) {
		munmap(p, FAKECU_PAGE_SIZE);
		close_devices();
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	__atomic_store_n(&p->magic, FAKECU_MAGIC, __ATOMIC_SEQ_CST);
	initialized = 1;
	return CUDA_SUCCESS;
}

/* fakecuDeviceList names the visible GPUs, comma-separated, for messages. */
EXPORT const char *fakecuDeviceList(void)
{
	return device_list;
}

/*
 * fakecuMemAlloc allocates the process's only "device memory" buffer, plus
 * the host buffer that checkpoint copies it into (the real driver also
 * moves device memory into the process's anonymous memory). The buffer
 * lives on visible GPU 0, CUDA's current device unless the app picks one.
 */
EXPORT int fakecuMemAlloc(void **dptr, size_t size)
{
	struct fakecu_page *p = self_page();
	void *dev, *save;

	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || size == 0 || p->dev_addr)
		return CUDA_ERROR_INVALID_VALUE;
	dev = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	save = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (dev == MAP_FAILED || save == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->dev_addr = (uint64_t)(uintptr_t)dev;
	p->save_addr = (uint64_t)(uintptr_t)save;
	p->dev_size = size;
	p->gpus[0].memory = size;
	*dptr = dev;
	return CUDA_SUCCESS;
}

/*
 * fakecuMemSpread spreads the buffer evenly over every visible GPU, as an
 * application that puts a slice on each device (the first GPU takes the
 * remainder), so that NVML lists the process on all of them.
 */
EXPORT int fakecuMemSpread(void)
{
	struct fakecu_page *p = self_page();
	uint64_t n, each;

	if (!initialized || !p->dev_size)
		return CUDA_ERROR_INVALID_VALUE;
	n = p->gpu_count;
	each = p->dev_size / n;
	for (uint64_t s = 0; s < n; s++)
		p->gpus[s].memory = each;
	p->gpus[0].memory += p->dev_size - each * n;
	return CUDA_SUCCESS;
}

/*
 * fakecuIpcExport marks the process as sharing device memory through CUDA
 * IPC (cuIpcGetMemHandle, cuMem shareable handles: NCCL's P2P, SHM and cuMem
 * transports). Driver 580 checkpoints such a process but cannot restore it.
 */
EXPORT void fakecuIpcExport(void)
{
	if (initialized)
		__atomic_or_fetch(&self_page()->flags, FAKECU_IPC, __ATOMIC_SEQ_CST);
}

/*
 * fakecuEnter starts a "CUDA call": it blocks while the process is locked or
 * checkpointed, as the real driver blocks API calls. Together with the
 * locker (store state, then load busy) this is Dekker's handshake, so a lock
 * never returns while a call is in flight.
 */
EXPORT void fakecuEnter(void)
{
	struct fakecu_page *p = self_page();

	for (;;) {
		__atomic_store_n(&p->busy, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&p->state, __ATOMIC_SEQ_CST) == FAKECU_RUNNING)
			return;
		__atomic_store_n(&p->busy, 0, __ATOMIC_SEQ_CST);
		usleep(2000);
	}
}

EXPORT void fakecuLeave(void)
{
	__atomic_store_n(&self_page()->busy, 0, __ATOMIC_SEQ_CST);
}

#ifndef FAKECU_NO_CHECKPOINT
#include "checkpoint.c"
#endif
