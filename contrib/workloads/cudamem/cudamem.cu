// cudamem: a CUDA workload that checks its own continuity across a
// checkpoint and restore.
//
// It fills SIZE MiB of device memory with a pattern derived from a seed, and
// keeps a counter in device memory. Every tick it increments the counter on
// the GPU, re-checks the whole pattern on the GPU, and prints
//
//   tick N counter=C verify=OK
//
// The host keeps its own tick count. After a restore the GPU counter must
// equal the host's (the device memory came back, and with it the counter),
// and the pattern must be intact; otherwise it prints verify=BAD and exits 3.
// SIGUSR1 corrupts one byte of the pattern, to check the check itself.
//
// Usage: cudamem [SIZE_MIB [INTERVAL_MS [TAG]]]   (defaults 64 and 200)
//
// With a TAG, every tick line ends in " w=TAG", so that several workers can
// share one output (contrib/workloads/multiproc).
#include <cuda_runtime.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                              \
	do {                                                                         \
		cudaError_t e_ = (call);                                                 \
		if (e_ != cudaSuccess) {                                                 \
			printf("cuda error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, \
			       __LINE__, cudaGetErrorString(e_));                            \
			exit(2);                                                             \
		}                                                                        \
	} while (0)

static const uint32_t SEED = 0x9e3779b9u;

__device__ __forceinline__ uint32_t pattern(uint64_t i) {
	uint32_t x = (uint32_t)i * 2654435761u ^ (uint32_t)(i >> 32) ^ SEED;
	x ^= x >> 15;
	return x * 0x2c1b3c6du;
}

__global__ void fill(uint32_t *buf, uint64_t n) {
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		buf[i] = pattern(i);
}

__global__ void verify(const uint32_t *buf, uint64_t n, unsigned long long *bad) {
	unsigned long long local = 0;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		local += buf[i] != pattern(i);
	if (local) atomicAdd(bad, local);
}

__global__ void bump(unsigned long long *counter) { *counter += 1; }

static volatile sig_atomic_t corrupt_requested = 0;
static void on_usr1(int sig) { (void)sig; corrupt_requested = 1; }

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	uint64_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 64;
	long interval_ms = argc > 2 ? strtol(argv[2], NULL, 10) : 200;
	const char *tag = argc > 3 ? argv[3] : NULL;
	uint64_t n = mib * (1024 * 1024 / sizeof(uint32_t));
	signal(SIGUSR1, on_usr1);

	cudaDeviceProp prop;
	CHECK(cudaGetDeviceProperties(&prop, 0));
	uint32_t *buf;
	unsigned long long *dev; // dev[0] = counter, dev[1] = mismatches
	CHECK(cudaMalloc(&buf, n * sizeof(uint32_t)));
	CHECK(cudaMalloc(&dev, 2 * sizeof(unsigned long long)));
	CHECK(cudaMemset(dev, 0, 2 * sizeof(unsigned long long)));
	fill<<<4 * prop.multiProcessorCount, 256>>>(buf, n);
	CHECK(cudaDeviceSynchronize());
	printf("ready pid=%d size_mib=%llu gpu=\"%s\"%s%s\n", getpid(), (unsigned long long)mib, prop.name,
	       tag ? " w=" : "", tag ? tag : "");

	unsigned long long host_ticks = 0, res[2];
	for (;;) {
		if (corrupt_requested) {
			corrupt_requested = 0;
			uint8_t flip = 0xff;
			CHECK(cudaMemcpy((uint8_t *)buf + 12345 % (n * 4), &flip, 1, cudaMemcpyHostToDevice));
			printf("corrupted one byte on request\n");
		}
		bump<<<1, 1>>>(dev);
		CHECK(cudaMemset(dev + 1, 0, sizeof(unsigned long long)));
		verify<<<4 * prop.multiProcessorCount, 256>>>(buf, n, dev + 1);
		CHECK(cudaMemcpy(res, dev, sizeof(res), cudaMemcpyDeviceToHost));
		host_ticks++;
		int ok = res[1] == 0 && res[0] == host_ticks;
		printf("tick %llu counter=%llu verify=%s", host_ticks, res[0], ok ? "OK" : "BAD");
		if (!ok) printf(" mismatches=%llu", res[1]);
		if (tag) printf(" w=%s", tag);
		printf("\n");
		if (!ok) return 3;
		struct timespec ts = {interval_ms / 1000, (interval_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
}
