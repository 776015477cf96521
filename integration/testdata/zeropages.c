/*
 * zeropages: a process tree whose private anonymous memory is mostly
 * touched zeros, for CRIU's zero-page patch (contrib/criu, 0004):
 *   zero     ZERO_MIB MiB, every page written with zeros, then marked pages
 *            made non-zero: the first and last pages whole, one page in
 *            1000 whole, and in others a single byte: the last one (past
 *            the probe of a page's start), the first one or one in the
 *            middle;
 *   written  WRITTEN_MIB MiB of pseudo-random words.
 * It forks a child that shares both copy-on-write and then changes its own
 * copy: it zeroes the parent's whole marked pages (a page the parent dumps
 * and the child does not) and writes pages that are zero in the parent.
 *
 * Each process checks every byte of both regions when it gets SIGUSR1 and
 * writes "ok" or what differs to result-parent or result-child. When the
 * child is ready the parent writes OUTFILE: "pid PID\nchild PID\nnonzero_kib
 * N\n", N the non-zero memory of both regions in both processes.
 *
 * Usage: zeropages ZERO_MIB WRITTEN_MIB OUTFILE
 * Build: gcc -O2 -o zeropages zeropages.c
 */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1UL << 20)
#define PAGE 4096UL

static char *zero, *written;
static size_t zero_pages, written_len;
static int is_child;
static volatile sig_atomic_t check_now;

/* The content of the marked pages of the zero region: 0 zero, 1 whole,
 * 2 last byte, 3 first byte, 4 middle byte. */
static int mark(size_t i)
{
	if (i == 0 || i == zero_pages - 1 || i % 1000 == 999)
		return 1;
	if (i % 1000 == 333)
		return 2;
	if (i % 1000 == 555)
		return 3;
	if (i % 1000 == 777)
		return 4;
	return 0;
}

/* What the child changed: its mark 1 pages in the middle are zero, and
 * pages 500 of each thousand are whole. */
static int child_mark(size_t i)
{
	if (i % 1000 == 999)
		return 0;
	if (i % 1000 == 500)
		return 1;
	return mark(i);
}

static unsigned char byte_at(size_t i, size_t off)
{
	return (unsigned char)((i * 131 + off * 7) | 1);
}

static void make_page(char *p, size_t i, int kind)
{
	memset(p, 0, PAGE);
	switch (kind) {
	case 1:
		for (size_t off = 0; off < PAGE; off++)
			p[off] = byte_at(i, off);
		break;
	case 2:
		p[PAGE - 1] = byte_at(i, PAGE - 1);
		break;
	case 3:
		p[0] = byte_at(i, 0);
		break;
	case 4:
		p[PAGE / 2] = byte_at(i, PAGE / 2);
		break;
	}
}

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void result(const char *text)
{
	int fd = open(is_child ? "result-child" : "result-parent", O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd >= 0) {
		if (write(fd, text, strlen(text)) < 0)
			_exit(4);
		close(fd);
	}
}

static void check(void)
{
	static char want[PAGE];
	char msg[256];
	uint64_t s = 88172645463325252ULL, *w = (uint64_t *)written;

	for (size_t i = 0; i < zero_pages; i++) {
		make_page(want, i, is_child ? child_mark(i) : mark(i));
		if (memcmp(zero + i * PAGE, want, PAGE)) {
			snprintf(msg, sizeof(msg), "bad zero-region page %zu (mark %d)\n", i,
				 is_child ? child_mark(i) : mark(i));
			result(msg);
			return;
		}
	}
	for (size_t i = 0; i < written_len / 8; i++) {
		if (w[i] != next(&s)) {
			snprintf(msg, sizeof(msg), "bad written word %zu\n", i);
			result(msg);
			return;
		}
	}
	result("ok\n");
}

static void on_usr1(int sig)
{
	(void)sig;
	check_now = 1;
}

int main(int argc, char **argv)
{
	size_t nonzero = 0;
	uint64_t s = 88172645463325252ULL;
	int ready[2];
	pid_t child;
	char c;
	FILE *f;

	if (argc != 4)
		return 2;
	zero_pages = strtoul(argv[1], NULL, 10) * MIB / PAGE;
	written_len = strtoul(argv[2], NULL, 10) * MIB;
	zero = mmap(NULL, zero_pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	written = mmap(NULL, written_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (zero == MAP_FAILED || written == MAP_FAILED)
		return 2;
	signal(SIGUSR1, on_usr1);
	for (size_t i = 0; i < zero_pages; i++) {
		make_page(zero + i * PAGE, i, mark(i));
		nonzero += mark(i) != 0;
	}
	for (size_t i = 0; i < written_len / 8; i++)
		((uint64_t *)written)[i] = next(&s);
	if (pipe(ready))
		return 2;
	switch ((child = fork())) {
	case -1:
		return 2;
	case 0:
		is_child = 1;
		close(ready[0]);
		for (size_t i = 0; i < zero_pages; i++)
			if (child_mark(i) != mark(i))
				make_page(zero + i * PAGE, i, child_mark(i));
		if (write(ready[1], "x", 1) != 1)
			return 2;
		close(ready[1]);
		break;
	default:
		close(ready[1]);
		if (read(ready[0], &c, 1) != 1)
			return 2;
		close(ready[0]);
		for (size_t i = 0; i < zero_pages; i++)
			nonzero += child_mark(i) != 0;
		f = fopen("out.tmp", "w");
		if (!f)
			return 2;
		fprintf(f, "pid %d\nchild %d\nnonzero_kib %zu\nzero_addr %lx\n", getpid(), child,
			nonzero * 4 + 2 * written_len / 1024, (unsigned long)zero);
		fclose(f);
		rename("out.tmp", argv[3]);
	}
	for (;;) {
		pause();
		if (check_now) {
			check_now = 0;
			check();
		}
	}
}
