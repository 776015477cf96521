/*
 * advice: a process whose private anonymous regions carry the madvise
 * advice a restore must keep exactly (smaps VmFlags), for CRIU's huge-page
 * fill (contrib/criu):
 *   dense    96 MiB, every page written, no advice, neither end 2 MiB-aligned;
 *   partial  64 MiB, no advice, the first 32 MiB written, then one page a MiB;
 *   huge     32 MiB, every page written, MADV_HUGEPAGE;
 *   nohuge   32 MiB, every page written, MADV_NOHUGEPAGE;
 *   seqlock  8 MiB, every page written, MADV_SEQUENTIAL and mlock (as
 *            CRIU's zdtm maps02 checks).
 * The regions are separated by PROT_NONE gaps so that each is one mapping.
 * It writes "NAME START END" lines to OUTFILE, then sleeps until killed.
 *
 * Usage: advice OUTFILE
 * Build: gcc -O2 -o advice advice.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1UL << 20)

static uint64_t seed = 0x9e3779b97f4a7c15ULL;

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

/* region makes [*at, *at+len) read-write inside the reservation, with
 * advice (0: none), and moves *at past it and a gap. */
static char *region(char **at, size_t len, int advice)
{
	char *p = *at;

	if (mprotect(p, len, PROT_READ | PROT_WRITE))
		die("advice: mprotect");
	if (advice && madvise(p, len, advice))
		die("advice: madvise");
	*at = p + len + 2 * MIB;
	return p;
}

int main(int argc, char **argv)
{
	char *base, *at, *dense, *partial, *huge, *nohuge, *seqlock;
	size_t total = 96 * MIB + 64 * MIB + 32 * MIB + 32 * MIB + 8 * MIB + 16 * MIB;
	FILE *out;

	if (argc != 2) {
		fprintf(stderr, "usage: advice OUTFILE\n");
		return 2;
	}
	base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED)
		die("advice: mmap");
	/* 2 MiB-aligned, then 1 MiB + 4 KiB in: dense has neither end aligned. */
	at = (char *)(((uintptr_t)base + 2 * MIB - 1) & ~(2 * MIB - 1)) + MIB + 4096;
	dense = region(&at, 96 * MIB, 0);
	partial = region(&at, 64 * MIB, 0);
	huge = region(&at, 32 * MIB, MADV_HUGEPAGE);
	nohuge = region(&at, 32 * MIB, MADV_NOHUGEPAGE);
	seqlock = region(&at, 8 * MIB, MADV_SEQUENTIAL);
	fill(dense, 96 * MIB);
	fill(partial, 32 * MIB);
	for (size_t off = 32 * MIB; off < 64 * MIB; off += MIB)
		fill(partial + off, 4096);
	fill(huge, 32 * MIB);
	fill(nohuge, 32 * MIB);
	fill(seqlock, 8 * MIB);
	if (mlock(seqlock, 8 * MIB))
		die("advice: mlock");

	out = fopen(argv[1], "w");
	if (!out)
		die("advice: output");
	fprintf(out, "dense %lx %lx\n", (unsigned long)dense, (unsigned long)(dense + 96 * MIB));
	fprintf(out, "partial %lx %lx\n", (unsigned long)partial, (unsigned long)(partial + 64 * MIB));
	fprintf(out, "huge %lx %lx\n", (unsigned long)huge, (unsigned long)(huge + 32 * MIB));
	fprintf(out, "nohuge %lx %lx\n", (unsigned long)nohuge, (unsigned long)(nohuge + 32 * MIB));
	fprintf(out, "seqlock %lx %lx\n", (unsigned long)seqlock, (unsigned long)(seqlock + 8 * MIB));
	fclose(out);
	for (;;)
		pause();
}
