/*
 * gpus.h: the fake host's GPU table, shared by fakenvml.c (what NVML
 * reports) and fakecuda.c (which GPUs a CUDA process sees, and which GPUs a
 * restore may move a process onto). One parser, so that both libraries of
 * one process always agree on the host.
 *
 * The table is text, GPUs separated by ';', each
 *     name|uuid|memory_total|cc[|memory_free[|minor]]
 * read from the file named by CRYO_FAKE_GPUS_FILE (when set and readable:
 * lets a test change a running daemon's GPUs), else from CRYO_FAKE_GPUS,
 * else DEFAULT_GPUS. An empty field takes its default: memory_total 80 GiB
 * (85520809984), cc 9.0, memory_free 99% of memory_total, minor the GPU's
 * index in the list. minor is the GPU's device node, /dev/nvidia<minor>, as
 * NVML's nvmlDeviceGetMinorNumber reports it.
 *
 * Everything here is static: each library includes its own copy.
 */
#ifndef FAKECUDA_GPUS_H
#define FAKECUDA_GPUS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKEGPU_MAX 16
#define DEFAULT_GPUS "NVIDIA H100 80GB HBM3|GPU-0b1c2d3e-0000-4000-8000-000000000001|85520809984|9.0"

/* Not every includer uses every helper; -Wall must stay quiet about that. */
#define FAKEGPU_FN static __attribute__((unused))

struct fakegpu {
	char name[96];
	char uuid[96];          /* as NVML prints it: GPU-xxxxxxxx-... */
	uint8_t raw[16];        /* the driver's CUuuid; zero if uuid does not parse */
	int raw_ok;
	unsigned long long total, free;
	int cc_major, cc_minor; /* compute capability */
	int minor;              /* device node /dev/nvidia<minor> */
};

struct fakegpu_table {
	struct fakegpu gpu[FAKEGPU_MAX];
	unsigned int n;
};

FAKEGPU_FN int fakegpu_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * fakegpu_parse_uuid turns "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (the
 * "GPU-" optional) into the 16 bytes of a CUuuid, the form the driver's
 * gpuPairs use. Returns 0 on success.
 */
FAKEGPU_FN int fakegpu_parse_uuid(const char *s, uint8_t raw[16])
{
	const char *h = strncmp(s, "GPU-", 4) == 0 ? s + 4 : s;
	char hex[32];
	int k = 0;

	if (strlen(h) != 36)
		return -1;
	for (int i = 0; i < 36; i++) {
		int dash = i == 8 || i == 13 || i == 18 || i == 23;
		if (dash != (h[i] == '-'))
			return -1;
		if (!dash)
			hex[k++] = h[i];
	}
	for (int i = 0; i < 16; i++) {
		int hi = fakegpu_hexval(hex[2 * i]), lo = fakegpu_hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		raw[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

/* fakegpu_format_uuid is the inverse: out holds at least 41 bytes. */
FAKEGPU_FN void fakegpu_format_uuid(const uint8_t raw[16], char *out)
{
	const char *x = "0123456789abcdef";
	char *o = out + 4;

	memcpy(out, "GPU-", 4);
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*o++ = '-';
		*o++ = x[raw[i] >> 4];
		*o++ = x[raw[i] & 15];
	}
	*o = 0;
}

/* fakegpu_split cuts s at '|' keeping empty fields: strtok would drop
 * them, and an empty memory_free must mean "default", not "the next field". */
FAKEGPU_FN int fakegpu_split(char *s, char **f, int max)
{
	int n = 0;

	while (s && n < max)
		f[n++] = strsep(&s, "|");
	return n;
}

FAKEGPU_FN int fakegpu_empty(const char *s) { return !s || !*s; }

FAKEGPU_FN void fakegpu_parse(struct fakegpu_table *t, char *spec)
{
	struct fakegpu *g = &t->gpu[t->n];
	char *f[6] = {0};
	int n = fakegpu_split(spec, f, 6);

	if (n < 2)
		return;
	memset(g, 0, sizeof(*g));
	snprintf(g->name, sizeof(g->name), "%s", f[0]);
	snprintf(g->uuid, sizeof(g->uuid), "%s", f[1]);
	g->raw_ok = fakegpu_parse_uuid(g->uuid, g->raw) == 0;
	g->total = fakegpu_empty(f[2]) ? 85520809984ULL : strtoull(f[2], NULL, 10);
	g->free = fakegpu_empty(f[4]) ? g->total - g->total / 100 : strtoull(f[4], NULL, 10);
	if (fakegpu_empty(f[3]) || sscanf(f[3], "%d.%d", &g->cc_major, &g->cc_minor) != 2) {
		g->cc_major = 9;
		g->cc_minor = 0;
	}
	g->minor = fakegpu_empty(f[5]) ? (int)t->n : atoi(f[5]);
	t->n++;
}

/* fakegpu_read_file returns the text of CRYO_FAKE_GPUS_FILE, trimmed, or NULL
 * when the variable is unset or the file cannot be read. */
FAKEGPU_FN char *fakegpu_read_file(void)
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

/* fakegpu_load fills t from this process's environment. */
FAKEGPU_FN void fakegpu_load(struct fakegpu_table *t)
{
	const char *env = getenv("CRYO_FAKE_GPUS");
	char *copy = fakegpu_read_file(), *save = NULL;

	if (!copy)
		copy = strdup(env ? env : DEFAULT_GPUS);
	t->n = 0;
	if (!copy)
		return;
	for (char *s = strtok_r(copy, ";", &save); s && t->n < FAKEGPU_MAX; s = strtok_r(NULL, ";", &save))
		fakegpu_parse(t, s);
	free(copy);
}

/* fakegpu_by_raw returns the index of the GPU with that CUuuid, or -1. */
FAKEGPU_FN int fakegpu_by_raw(const struct fakegpu_table *t, const uint8_t raw[16])
{
	for (unsigned int i = 0; i < t->n; i++)
		if (t->gpu[i].raw_ok && memcmp(t->gpu[i].raw, raw, 16) == 0)
			return (int)i;
	return -1;
}

/* fakegpu_by_minor returns the index of the GPU at /dev/nvidia<minor>, or -1. */
FAKEGPU_FN int fakegpu_by_minor(const struct fakegpu_table *t, int minor)
{
	for (unsigned int i = 0; i < t->n; i++)
		if (t->gpu[i].minor == minor)
			return (int)i;
	return -1;
}

#endif
