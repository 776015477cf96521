/*
 * netserver: a TCP and UDP server whose answers carry a counter kept in its
 * memory, so that a client can tell a restored server from a fresh one.
 * Each request ("ping", a line on any TCP connection or one UDP datagram)
 * is answered "pong N", N counting all requests so far. It binds 0.0.0.0.
 * A line "bye" is answered "bye" and the server closes that connection
 * first, which leaves a TIME_WAIT socket on its listening port.
 *
 * Usage: netserver PORT [noreuse]   (noreuse: no SO_REUSEADDR, as NCCL's
 * and many servers' listeners)
 * Build: gcc -O2 -static -o netserver netserver.c
 */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

static long count;
static int reuse = 1;

static int bound(int type, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int one = 1, fd = socket(AF_INET, type, 0);

	if (reuse)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("netserver: bind");
		exit(1);
	}
	return fd;
}

static void answer_udp(int fd)
{
	char buf[512];
	struct sockaddr_in peer;
	socklen_t n = sizeof(peer);

	if (recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&peer, &n) < 0)
		return;
	n = (socklen_t)snprintf(buf, sizeof(buf), "pong %ld\n", ++count);
	sendto(fd, buf, n, 0, (struct sockaddr *)&peer, sizeof(peer));
}

/* answer_tcp answers every line of what arrived; 0 when the connection
 * is to be closed (the peer closed, or said bye). */
static int answer_tcp(int fd)
{
	char buf[512], out[64];
	ssize_t n = read(fd, buf, sizeof(buf));

	if (n <= 0)
		return 0;
	for (ssize_t i = 0, start = 0; i < n; start = ++i) {
		while (i < n && buf[i] != '\n')
			i++;
		if (i == n)
			break;
		if (i - start == 3 && memcmp(buf + start, "bye", 3) == 0) {
			(void)!write(fd, "bye\n", 4);
			return 0;
		}
		int k = snprintf(out, sizeof(out), "pong %ld\n", ++count);
		if (write(fd, out, k) != k)
			return 0;
	}
	return 1;
}

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 7000, conns[FD_SETSIZE] = {0};

	reuse = !(argc > 2 && strcmp(argv[2], "noreuse") == 0);
	int tcp = bound(SOCK_STREAM, port), udp = bound(SOCK_DGRAM, port);

	listen(tcp, 16);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("listening on %d\n", port);
	for (;;) {
		fd_set rd;
		int max = tcp > udp ? tcp : udp;

		FD_ZERO(&rd);
		FD_SET(tcp, &rd);
		FD_SET(udp, &rd);
		for (int fd = 0; fd < FD_SETSIZE; fd++)
			if (conns[fd]) {
				FD_SET(fd, &rd);
				max = fd > max ? fd : max;
			}
		if (select(max + 1, &rd, NULL, NULL, NULL) < 0)
			continue;
		if (FD_ISSET(tcp, &rd)) {
			int c = accept(tcp, NULL, NULL);
			if (c >= 0 && c < FD_SETSIZE)
				conns[c] = 1;
		}
		if (FD_ISSET(udp, &rd))
			answer_udp(udp);
		for (int fd = 0; fd < FD_SETSIZE; fd++)
			if (conns[fd] && FD_ISSET(fd, &rd) && !answer_tcp(fd)) {
				close(fd);
				conns[fd] = 0;
			}
	}
}
