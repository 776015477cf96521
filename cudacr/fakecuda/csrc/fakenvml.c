/*
 * fakenvml.c: a fake libnvidia-ml.so.1 with just what cryo's inventory
 * (through go-nvml) calls.
 *
 * Build: gcc -shared -fPIC -O2 -o libnvidia-ml.so.1 fakenvml.c
 *
 * Environment:
 *   CRYO_FAKE_GPUS            GPUs separated by ';', each
 *                             name|uuid|memory_total_bytes|compute_capability[|memory_free_bytes]
 *                             default: one NVIDIA H100 80GB HBM3
 *   CRYO_FAKE_GPUS_FILE       a file holding the same text; read at every
 *                             nvmlInit, so GPUs can change at run time;
 *                             when set and readable it wins over CRYO_FAKE_GPUS
 *   CRYO_FAKE_DRIVER_VERSION  default 580.159.04
 *   CRYO_FAKE_CUDA_VERSION    default 13000
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_GPUS 16
#define DEFAULT_GPUS "NVIDIA H100 80GB HBM3|GPU-0b1c2d3e-0000-4000-8000-000000000001|85520809984|9.0"

typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_UNKNOWN = 999,
};

struct nvmlDevice_st {
	char name[96];
	char uuid[96];
	unsigned long long total, free;
	int major, minor;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

static struct nvmlDevice_st gpus[MAX_GPUS];
static unsigned int ngpus;
static int refs;

static void parse_gpu(char *spec)
{
	struct nvmlDevice_st *g = &gpus[ngpus];
	char *f[5] = {0}, *save = NULL;
	int n = 0;

	for (char *t = strtok_r(spec, "|", &save); t && n < 5; t = strtok_r(NULL, "|", &save))
		f[n++] = t;
	if (n < 2)
		return;
	memset(g, 0, sizeof(*g));
	snprintf(g->name, sizeof(g->name), "%s", f[0]);
	snprintf(g->uuid, sizeof(g->uuid), "%s", f[1]);
	g->total = f[2] ? strtoull(f[2], NULL, 10) : 85520809984ULL;
	g->free = f[4] ? strtoull(f[4], NULL, 10) : g->total - g->total / 100;
	if (!f[3] || sscanf(f[3], "%d.%d", &g->major, &g->minor) != 2) {
		g->major = 9;
		g->minor = 0;
	}
	ngpus++;
}

/* read_gpus_file returns the text of CRYO_FAKE_GPUS_FILE, trimmed, or NULL
 * when the variable is unset or the file cannot be read. */
static char *read_gpus_file(void)
{
	const char *path = getenv("CRYO_FAKE_GPUS_FILE");
	char buf[4096];
	size_t n;
	FILE *f;

	if (!path || !*path || !(f = fopen(path, "r")))
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		buf[--n] = 0;
	return strdup(buf);
}

static void load_gpus(void)
{
	const char *env = getenv("CRYO_FAKE_GPUS");
	char *copy = read_gpus_file(), *save = NULL;

	if (!copy)
		copy = strdup(env ? env : DEFAULT_GPUS);

	ngpus = 0;
	for (char *t = strtok_r(copy, ";", &save); t && ngpus < MAX_GPUS; t = strtok_r(NULL, ";", &save))
		parse_gpu(t);
	free(copy);
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	if (refs++ == 0)
		load_gpus();
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
	*n = ngpus;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return nvmlDeviceGetCount_v2(n); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	if (!refs)
		return NVML_ERROR_UNINITIALIZED;
	if (!d || i >= ngpus)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = &gpus[i];
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
	*i = (unsigned int)(d - gpus);
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

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	if (!d || !m)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = d->total;
	m->free = d->free;
	m->used = d->total - d->free;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
	if (!d || !m)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = d->total;
	m->reserved = 0;
	m->free = d->free;
	m->used = d->total - d->free;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
	if (!d || !major || !minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	*major = d->major;
	*minor = d->minor;
	return NVML_SUCCESS;
}
