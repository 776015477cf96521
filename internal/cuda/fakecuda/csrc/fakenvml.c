/*
 * fakenvml.c: a fake libnvidia-ml.so.1 with just what cryo's inventory
 * (through go-nvml) calls.
 *
 * Build: gcc -shared -fPIC -O2 -o libnvidia-ml.so.1 fakenvml.c
 *
 * The processes on a GPU are real: the fake CUDA processes of this host
 * (found through their state pages, fakecuda.h) that hold "device memory"
 * on it. Free memory drops by what they hold. Reading their pages needs
 * ptrace rights on them (root), as cryo's helper has.
 *
 * Environment:
 *   CRYO_FAKE_GPUS            GPUs separated by ';', each
 *                             name|uuid|memory_total_bytes|compute_capability[|memory_free_bytes[|minor]]
 *                             default: one NVIDIA H100 80GB HBM3 (gpus.h)
 *   CRYO_FAKE_GPUS_FILE       a file holding the same text; read at every
 *                             nvmlInit, so GPUs can change at run time;
 *                             when set and readable it wins over CRYO_FAKE_GPUS
 *   CRYO_FAKE_DRIVER_VERSION  default 580.159.04
 *   CRYO_FAKE_CUDA_VERSION    default 13000
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "gpus.h"

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_UNKNOWN = 999,
};

/* A device handle points into the table (nvmlDeviceGetIndex relies on it). */
typedef struct fakegpu *nvmlDevice_t;

typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

/* nvmlDeviceGetComputeRunningProcesses (unversioned): the v1 layout. */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/* _v2 and _v3 (nvmlProcessInfo_t): the MIG instance ids follow. */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "v1 layout");
_Static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "v2 layout");

#define NO_MIG 0xFFFFFFFFu

static struct fakegpu_table table;
static int refs;

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	if (refs++ == 0)
		fakegpu_load(&table);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return nvmlInit_v2(); }

EXPORT nvmlReturn_t nvmlShutdown(void)
{
	if (refs == 0)
		return NVML_ERROR_UNINITIALIZED;
	refs--;
	return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	}
	return "Unknown Error";
}

static nvmlReturn_t put_string(char *dst, unsigned int n, const char *src)
{
	if (!dst)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(src) + 1 > n)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	strcpy(dst, src);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n)
{
	const char *s = getenv("CRYO_FAKE_DRIVER_VERSION");

	if (!refs)
		return NVML_ERROR_UNINITIALIZED;
	return put_string(v, n, s && *s ? s : "580.159.04");
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
	const char *s = getenv("CRYO_FAKE_CUDA_VERSION");

	if (!v)
		return NVML_ERROR_INVALID_ARGUMENT;
	*v = s && *s ? atoi(s) : 13000;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	if (!refs)
		return NVML_ERROR_UNINITIALIZED;
	if (!n)
		return NVML_ERROR_INVALID_ARGUMENT;
	*n = table.n;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return nvmlDeviceGetCount_v2(n); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	if (!refs)
		return NVML_ERROR_UNINITIALIZED;
	if (!d || i >= table.n)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = &table.gpu[i];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d)
{
	return nvmlDeviceGetHandleByIndex_v2(i, d);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i)
{
	if (!d || !i)
		return NVML_ERROR_INVALID_ARGUMENT;
	*i = (unsigned int)(d - table.gpu);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *s, unsigned int n)
{
	return d ? put_string(s, n, d->name) : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *s, unsigned int n)
{
	return d ? put_string(s, n, d->uuid) : NVML_ERROR_INVALID_ARGUMENT;
}

/* ---- The fake CUDA processes of the host. ---- */

struct gpu_user {
	unsigned int pid;
	unsigned long long memory;
};

/* read_page reads pid's state page; 0 if pid is a fake CUDA process. */
static int read_page(int pid, struct fakecu_page *p)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = pread(fd, p, sizeof(*p), (off_t)FAKECU_PAGE_ADDR);
	close(fd);
	return n == (ssize_t)sizeof(*p) && p->magic == FAKECU_MAGIC && p->layout >= 2 ? 0 : -1;
}

/* held is what a process holds on g: only a running or locked process has
 * device memory (a checkpointed one gave it back to the driver). */
static unsigned long long held(const struct fakecu_page *p, const struct fakegpu *g)
{
	unsigned long long sum = 0;

	if (!g->raw_ok || (p->state != FAKECU_RUNNING && p->state != FAKECU_LOCKED))
		return 0;
	for (uint64_t s = 0; s < p->gpu_count && s < FAKECU_MAX_GPUS; s++)
		if (!memcmp(p->gpus[s].uuid, g->raw, 16))
			sum += p->gpus[s].memory;
	return sum;
}

static int is_pid(const char *name)
{
	if (!*name)
		return 0;
	for (; *name; name++)
		if (!isdigit((unsigned char)*name))
			return 0;
	return 1;
}

/*
 * users lists the processes holding memory on g, in /proc order; the caller
 * frees *out. Returns their number.
 */
static unsigned int users(const struct fakegpu *g, struct gpu_user **out)
{
	struct fakecu_page page;
	unsigned int n = 0, cap = 0;
	struct dirent *e;
	DIR *d = opendir("/proc");

	*out = NULL;
	while (d && (e = readdir(d))) {
		unsigned long long mem;

		if (!is_pid(e->d_name) || read_page(atoi(e->d_name), &page) || !(mem = held(&page, g)))
			continue;
		if (n == cap) {
			struct gpu_user *more = realloc(*out, (cap = cap ? 2 * cap : 8) * sizeof(**out));
			if (!more)
				break;
			*out = more;
		}
		(*out)[n++] = (struct gpu_user){(unsigned int)atoi(e->d_name), mem};
	}
	if (d)
		closedir(d);
	return n;
}

/* free_memory is the table's free memory less what fake processes hold. */
static unsigned long long free_memory(const struct fakegpu *g)
{
	struct gpu_user *u;
	unsigned int n = users(g, &u);
	unsigned long long used = 0;

	for (unsigned int i = 0; i < n; i++)
		used += u[i].memory;
	free(u);
	return used >= g->free ? 0 : g->free - used;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	if (!d || !m)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = d->total;
	m->free = free_memory(d);
	m->used = d->total > m->free ? d->total - m->free : 0;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
	if (!d || !m)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = d->total;
	m->reserved = 0;
	m->free = free_memory(d);
	m->used = d->total > m->free ? d->total - m->free : 0;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor)
{
	if (!d || !minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	*minor = (unsigned int)d->minor;
	return NVML_SUCCESS;
}

/*
 * compute_procs answers every version of the compute-process query, v2
 * selecting the 24-byte layout. NVML's size protocol: when *count is too
 * small, *count becomes the number needed and the answer
 * NVML_ERROR_INSUFFICIENT_SIZE (so *count = 0 asks for the number).
 */
static nvmlReturn_t compute_procs(nvmlDevice_t d, unsigned int *count, void *infos, int v2)
{
	struct gpu_user *u;
	unsigned int n;

	if (!refs)
		return NVML_ERROR_UNINITIALIZED;
	if (!d || !count)
		return NVML_ERROR_INVALID_ARGUMENT;
	n = users(d, &u);
	if (*count < n || (n && !infos)) {
		*count = n;
		free(u);
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned int i = 0; i < n; i++) {
		if (v2)
			((nvmlProcessInfo_v2_t *)infos)[i] = (nvmlProcessInfo_v2_t){u[i].pid, u[i].memory, NO_MIG, NO_MIG};
		else
			((nvmlProcessInfo_v1_t *)infos)[i] = (nvmlProcessInfo_v1_t){u[i].pid, u[i].memory};
	}
	*count = n;
	free(u);
	return NVML_SUCCESS;
}

/* go-nvml picks _v3 when the library has it, else _v2, else the plain
 * name (its "_v1"); all are exported so that any choice works. */
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *infos)
{
	return compute_procs(d, count, infos, 0);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v1(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *infos)
{
	return compute_procs(d, count, infos, 0);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v2_t *infos)
{
	return compute_procs(d, count, infos, 1);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v2_t *infos)
{
	return compute_procs(d, count, infos, 1);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
	if (!d || !major || !minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	*major = d->cc_major;
	*minor = d->cc_minor;
	return NVML_SUCCESS;
}
