/*
 * iouring: a process that holds an io_uring instance, which CRIU cannot
 * checkpoint (as PyTorch's TCPStore does through libuv). It prints "ready"
 * and sleeps.          Build: gcc -O2 -o iouring iouring.c
 */
#include <linux/io_uring.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void)
{
	struct io_uring_params p;

	memset(&p, 0, sizeof(p));
	if (syscall(__NR_io_uring_setup, 4, &p) < 0) {
		perror("iouring: io_uring_setup");
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	for (;;)
		pause();
}
