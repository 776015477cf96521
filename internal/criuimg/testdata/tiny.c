// A process with no libc: its dump holds a page or two of stack, so its
// CRIU images stay small enough to keep as test data.
#include <asm/unistd.h>
#include <linux/in.h>
#include <linux/un.h>
#include <linux/fcntl.h>

static long sys(long n, long a, long b, long c) {
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
}

void __attribute__((noreturn)) start_c(long *sp) {
	for (long fd = 0; fd < 64; fd++) sys(__NR_close, fd, 0, 0);
	sys(__NR_open, (long)"/tmp/criuinfo/held.txt", O_RDWR | O_CREAT, 0600);
	long l = sys(__NR_socket, 2, 1, 0);
	struct sockaddr_in a = {.sin_family = 2, .sin_port = __builtin_bswap16(47311), .sin_addr = {__builtin_bswap32(0x7f000001)}};
	sys(__NR_bind, l, (long)&a, sizeof a);
	sys(__NR_listen, l, 4, 0);
	long u = sys(__NR_socket, 1, 1, 0);
	struct sockaddr_un ua = {.sun_family = 1, .sun_path = "/tmp/criuinfo/app.sock"};
	sys(__NR_unlink, (long)ua.sun_path, 0, 0);
	sys(__NR_bind, u, (long)&ua, sizeof ua);
	sys(__NR_listen, u, 4, 0);
	sys(__NR_fork, 0, 0, 0);
	for (;;) sys(__NR_pause, 0, 0, 0);
}

__asm__(".globl _start\n_start:\n mov %rsp, %rdi\n and $-16, %rsp\n call start_c\n");
