/*
 * zeroshm: a process whose shared memory is mostly touched zeros, for
 * CRIU's zero-page patch of shared memory (contrib/criu, 0006). Three
 * regions of MIB MiB each:
 *   shared  mmap(MAP_SHARED | MAP_ANONYMOUS), as Python's mmap.mmap(-1, n);
 *   memfd   memfd_create, ftruncate and mmap(MAP_SHARED);
 *   sysv    shmget(IPC_PRIVATE) and shmat (run it in an IPC namespace of
 *           its own, `unshare --ipc`, so that CRIU dumps the segment).
 * Every page is written with zeros, then marked pages are made non-zero:
 * the first and last pages whole, one page in 1000 whole, and in others a
 * single byte (the last one, the first one or one in the middle).
 *
 * On SIGUSR1 it counts the pages of each region that are in memory
 * (mincore: a shmem region's page cache, holes excluded), then checks every
 * byte, and writes "ok shared N memfd N sysv N" or what differs to result.
 * When ready it writes OUTFILE: "nonzero_kib N\n".
 *
 * Usage: zeroshm MIB OUTFILE
 * Build: gcc -O2 -o zeroshm zeroshm.c
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#define MIB (1UL << 20)
#define PAGE 4096UL

static const char *names[3] = { "shared", "memfd", "sysv" };
static char *region[3];
static size_t pages;
static volatile sig_atomic_t check_now;

/* 0 zero, 1 whole, 2 last byte, 3 first byte, 4 middle byte; each kind
 * is marked at other pages (k shifts the pattern). */
static int mark(size_t i, int k)
{
	size_t j = (i + 100 * k) % 1000;

	if (i == 0 || i == pages - 1 || j == 999)
		return 1;
	if (j == 333)
		return 2;
	if (j == 555)
		return 3;
	if (j == 777)
		return 4;
	return 0;
}

static unsigned char byte_at(size_t i, size_t off, int k)
{
	return (unsigned char)((i * 131 + off * 7 + k) | 1);
}

static void make_page(char *p, size_t i, int k)
{
	switch (mark(i, k)) {
	case 1:
		for (size_t off = 0; off < PAGE; off++)
			p[off] = byte_at(i, off, k);
		break;
	case 2:
		p[PAGE - 1] = byte_at(i, PAGE - 1, k);
		break;
	case 3:
		p[0] = byte_at(i, 0, k);
		break;
	case 4:
		p[PAGE / 2] = byte_at(i, PAGE / 2, k);
		break;
	}
}

static void result(const char *text)
{
	int fd = open("result", O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd >= 0) {
		if (write(fd, text, strlen(text)) < 0)
			_exit(4);
		close(fd);
	}
}

/* The pages of a region in memory, counted before anything reads it: a
 * read fault of a shmem hole allocates a page. */
static size_t resident(char *r)
{
	static unsigned char vec[(1UL << 30) / PAGE];
	size_t n = 0;

	if (mincore(r, pages * PAGE, vec))
		return (size_t)-1;
	for (size_t i = 0; i < pages; i++)
		n += vec[i] & 1;
	return n;
}

static void check(void)
{
	static char want[PAGE];
	char msg[256];
	size_t res[3];

	for (int k = 0; k < 3; k++)
		res[k] = resident(region[k]);
	for (int k = 0; k < 3; k++)
		for (size_t i = 0; i < pages; i++) {
			memset(want, 0, PAGE);
			make_page(want, i, k);
			if (memcmp(region[k] + i * PAGE, want, PAGE)) {
				snprintf(msg, sizeof(msg), "bad %s page %zu (mark %d)\n", names[k], i, mark(i, k));
				result(msg);
				return;
			}
		}
	snprintf(msg, sizeof(msg), "ok shared %zu memfd %zu sysv %zu\n", res[0], res[1], res[2]);
	result(msg);
}

static void on_usr1(int sig)
{
	(void)sig;
	check_now = 1;
}

int main(int argc, char **argv)
{
	size_t nonzero = 0;
	int fd, id;
	FILE *f;

	if (argc != 3)
		return 2;
	pages = strtoul(argv[1], NULL, 10) * MIB / PAGE;
	if (!pages || pages > (1UL << 30) / PAGE)
		return 2;

	region[0] = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	fd = memfd_create("zeroshm", 0);
	if (fd < 0 || ftruncate(fd, pages * PAGE))
		return 3;
	region[1] = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	id = shmget(IPC_PRIVATE, pages * PAGE, IPC_CREAT | 0600);
	region[2] = id < 0 ? MAP_FAILED : shmat(id, NULL, 0);
	if (region[0] == MAP_FAILED || region[1] == MAP_FAILED || region[2] == MAP_FAILED)
		return 3;

	for (int k = 0; k < 3; k++) {
		memset(region[k], 0, pages * PAGE); /* every page present */
		for (size_t i = 0; i < pages; i++)
			if (mark(i, k)) {
				make_page(region[k] + i * PAGE, i, k);
				nonzero += PAGE;
			}
	}

	signal(SIGUSR1, on_usr1);
	f = fopen(argv[2], "w");
	if (!f)
		return 3;
	fprintf(f, "nonzero_kib %zu\n", nonzero >> 10);
	fclose(f);
	for (;;) {
		if (check_now) {
			check_now = 0;
			check();
		}
		pause();
	}
}
