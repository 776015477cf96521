/*
 * zeroprefault: a process for the zero prefault of cryo's CRIU
 * (contrib/criu, 0004), its private anonymous regions separated by
 * PROT_NONE gaps so that each is one mapping:
 *   zeros    ZERO_MIB MiB, every page written with zeros, then one page in
 *            every 64 MiB (at 32 MiB, 96 MiB...) filled with pseudo-random
 *            words: the dump leaves the zero pages out;
 *   data     16 MiB of pseudo-random words;
 *   reserve  RESERVE_MIB MiB reserved (MAP_NORESERVE) and never touched but
 *            for one byte in its middle page: its holes were never in use.
 * It writes "NAME START END" lines to OUTFILE, then sleeps until killed.
 * On SIGUSR1 it reads one word of every page of zeros, as a CUDA resume
 * reads its backup memory, and writes "read_us N" to the file "read" in
 * its working directory (for the benchmark in docs/benchmarks.md).
 *
 * Usage: zeroprefault ZERO_MIB RESERVE_MIB OUTFILE
 * Build: gcc -O2 -o zeroprefault zeroprefault.c
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MIB (1UL << 20)
#define PAGE 4096UL

static char *zeros;
static size_t zero_len;
static volatile sig_atomic_t read_now;

static void on_usr1(int sig)
{
	(void)sig;
	read_now = 1;
}

/* read_zeros times a read of every page of zeros. */
static void read_zeros(void)
{
	struct timespec t0, t1;
	uint64_t sum = 0;
	FILE *f;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (size_t off = 0; off < zero_len; off += PAGE)
		sum += *(volatile uint64_t *)(zeros + off);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	f = fopen("read.tmp", "w");
	if (!f)
		return;
	fprintf(f, "read_us %ld sum %lu\n",
		(long)((t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000), (unsigned long)sum);
	fclose(f);
	rename("read.tmp", "read");
}

static uint64_t seed = 0x2545f4914f6cdd1dULL;

/* fill writes pseudo-random words to [p, p+len) (xorshift64). */
static void fill(char *p, size_t len)
{
	uint64_t *w = (uint64_t *)p;

	for (size_t i = 0; i < len / 8; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		w[i] = seed;
	}
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* region makes [*at, *at+len) read-write and moves *at past it and a gap. */
static char *region(char **at, size_t len)
{
	char *p = *at;

	if (mprotect(p, len, PROT_READ | PROT_WRITE))
		die("zeroprefault: mprotect");
	*at = p + len + 2 * MIB;
	return p;
}

int main(int argc, char **argv)
{
	size_t reserve_len, total;
	char *base, *at, *data, *reserve;
	FILE *out;

	if (argc != 4) {
		fprintf(stderr, "usage: zeroprefault ZERO_MIB RESERVE_MIB OUTFILE\n");
		return 2;
	}
	zero_len = strtoul(argv[1], NULL, 10) * MIB;
	reserve_len = strtoul(argv[2], NULL, 10) * MIB;
	total = zero_len + 16 * MIB + reserve_len + 16 * MIB;
	base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED)
		die("zeroprefault: mmap");
	at = (char *)(((uintptr_t)base + 2 * MIB - 1) & ~(2 * MIB - 1));
	zeros = region(&at, zero_len);
	data = region(&at, 16 * MIB);
	reserve = region(&at, reserve_len);

	/* Written, so present: zero pages that a dump finds and leaves out. */
	for (size_t off = 0; off < zero_len; off += PAGE)
		*(volatile uint64_t *)(zeros + off) = 0;
	for (size_t off = 32 * MIB; off < zero_len; off += 64 * MIB)
		fill(zeros + off, PAGE);
	fill(data, 16 * MIB);
	reserve[reserve_len / 2] = 1;

	out = fopen(argv[3], "w");
	if (!out)
		die("zeroprefault: fopen");
	fprintf(out, "zeros %lx %lx\n", (unsigned long)zeros, (unsigned long)(zeros + zero_len));
	fprintf(out, "data %lx %lx\n", (unsigned long)data, (unsigned long)(data + 16 * MIB));
	fprintf(out, "reserve %lx %lx\n", (unsigned long)reserve, (unsigned long)(reserve + reserve_len));
	fclose(out);
	signal(SIGUSR1, on_usr1);
	for (;;) {
		pause();
		if (read_now) {
			read_now = 0;
			read_zeros();
		}
	}
}
