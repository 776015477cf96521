/*
 * hugefill: a process whose private anonymous memory has the shapes a
 * restore fills differently, for CRIU's huge-page fill (contrib/criu):
 *   filled   MIB MiB, every page written, not 2 MiB-aligned at either end;
 *   sparse   64 MiB, one page written per MiB;
 *   nohuge   64 MiB, every page written, with MADV_NOHUGEPAGE;
 *   partial  64 MiB, the first 32 MiB written, then one page per MiB.
 * The regions are separated by PROT_NONE gaps so that each is one mapping.
 * It writes "NAME START END" lines to OUTFILE, then sleeps until killed.
 *
 * Usage: hugefill MIB OUTFILE
 * Build: gcc -O2 -o hugefill hugefill.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1UL << 20)

static uint64_t seed = 88172645463325252ULL;

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

/* region makes [*at, *at+len) read-write inside the reservation, after a
 * gap, and moves *at past it. */
static char *region(char **at, size_t len)
{
	char *p = *at;

	if (mprotect(p, len, PROT_READ | PROT_WRITE)) {
		perror("hugefill: mprotect");
		exit(1);
	}
	*at = p + len + 2 * MIB;
	return p;
}

int main(int argc, char **argv)
{
	size_t big, total;
	char *base, *at, *filled, *sparse, *nohuge, *partial;
	FILE *out;

	if (argc != 3) {
		fprintf(stderr, "usage: hugefill MIB OUTFILE\n");
		return 2;
	}
	big = strtoul(argv[1], NULL, 10) * MIB;
	total = big + 3 * 64 * MIB + 16 * MIB;
	base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED) {
		perror("hugefill: mmap");
		return 1;
	}
	/* 2 MiB-aligned, then 1 MiB + 4 KiB in: neither end is aligned. */
	at = (char *)(((uintptr_t)base + 2 * MIB - 1) & ~(2 * MIB - 1)) + MIB + 4096;
	filled = region(&at, big);
	sparse = region(&at, 64 * MIB);
	nohuge = region(&at, 64 * MIB);
	partial = region(&at, 64 * MIB);
	if (madvise(nohuge, 64 * MIB, MADV_NOHUGEPAGE)) {
		perror("hugefill: madvise");
		return 1;
	}
	fill(filled, big);
	fill(nohuge, 64 * MIB);
	fill(partial, 32 * MIB);
	for (size_t off = 0; off < 64 * MIB; off += MIB)
		fill(sparse + off, 4096);
	for (size_t off = 32 * MIB; off < 64 * MIB; off += MIB)
		fill(partial + off, 4096);

	out = fopen(argv[2], "w");
	if (!out) {
		perror("hugefill: output");
		return 1;
	}
	fprintf(out, "filled %lx %lx\n", (unsigned long)filled, (unsigned long)(filled + big));
	fprintf(out, "sparse %lx %lx\n", (unsigned long)sparse, (unsigned long)(sparse + 64 * MIB));
	fprintf(out, "nohuge %lx %lx\n", (unsigned long)nohuge, (unsigned long)(nohuge + 64 * MIB));
	fprintf(out, "partial %lx %lx\n", (unsigned long)partial, (unsigned long)(partial + 64 * MIB));
	fclose(out);
	for (;;)
		pause();
}
