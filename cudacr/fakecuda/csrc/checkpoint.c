/*
 * checkpoint.c: the fake cuCheckpointProcess* entry points. Included by
 * fakecuda.c (one translation unit, so the build is one gcc line).
 *
 * These run in the caller's process and reach the target's state page
 * through /proc/PID/mem. They write single fields, never the whole page,
 * so they never clobber the "busy" flag the application owns.
 */
typedef struct {
	unsigned char bytes[16];
} CUuuid;
typedef struct {
	CUuuid oldUuid;
	CUuuid newUuid;
} CUcheckpointGpuPair;
typedef struct {
	unsigned int timeoutMs;
	unsigned int reserved0;
	uint64_t reserved1[7];
} CUcheckpointLockArgs;
typedef struct {
	uint64_t reserved[8];
} CUcheckpointCheckpointArgs;
typedef struct {
	CUcheckpointGpuPair *gpuPairs;
	unsigned int gpuPairsCount;
	char reserved[52 - sizeof(CUcheckpointGpuPair *)];
	uint64_t reserved1;
} CUcheckpointRestoreArgs;
typedef struct {
	uint64_t reserved[8];
} CUcheckpointUnlockArgs;
typedef int CUprocessState;

_Static_assert(sizeof(CUcheckpointLockArgs) == 64, "lock args");
_Static_assert(sizeof(CUcheckpointRestoreArgs) == 64, "restore args");

#define FIELD(f) offsetof(struct fakecu_page, f)

/* proc_open opens /proc/PID/mem; a missing process is INVALID_VALUE. */
static CUresult proc_open(int pid, int *fd)
{
	char path[64];

	if (pid <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	*fd = open(path, O_RDWR | O_CLOEXEC);
	if (*fd < 0)
		return errno == ENOENT || errno == ESRCH ? CUDA_ERROR_INVALID_VALUE
							 : CUDA_ERROR_OPERATING_SYSTEM;
	return CUDA_SUCCESS;
}

static int get_u64(int fd, size_t off, uint64_t *v)
{
	return pread(fd, v, 8, (off_t)(FAKECU_PAGE_ADDR + off)) == 8 ? 0 : -1;
}

static int put_u64(int fd, size_t off, uint64_t v)
{
	return pwrite(fd, &v, 8, (off_t)(FAKECU_PAGE_ADDR + off)) == 8 ? 0 : -1;
}

/*
 * attach opens the target and reads its state. A process without the page
 * holds no CUDA state: the real driver answers NOT_INITIALIZED there.
 */
static CUresult attach(int pid, int *fd, uint64_t *state)
{
	uint64_t magic = 0;
	CUresult r = proc_open(pid, fd);

	if (r)
		return r;
	if (get_u64(*fd, FIELD(magic), &magic) || magic != FAKECU_MAGIC ||
	    get_u64(*fd, FIELD(state), state)) {
		close(*fd);
		return CUDA_ERROR_NOT_INITIALIZED;
	}
	return CUDA_SUCCESS;
}

static void bump(int fd, size_t off)
{
	uint64_t n = 0;

	get_u64(fd, off, &n);
	put_u64(fd, off, n + 1);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* copy_mem moves n bytes inside the target, from src to dst. */
static CUresult copy_mem(int fd, uint64_t dst, uint64_t src, uint64_t n)
{
	static char buf[1 << 16];

	for (uint64_t done = 0; done < n;) {
		size_t k = n - done < sizeof(buf) ? (size_t)(n - done) : sizeof(buf);
		if (pread(fd, buf, k, (off_t)(src + done)) != (ssize_t)k ||
		    pwrite(fd, buf, k, (off_t)(dst + done)) != (ssize_t)k)
			return CUDA_ERROR_OPERATING_SYSTEM;
		done += k;
	}
	return CUDA_SUCCESS;
}

/* scrub overwrites the device buffer, as its GPU memory is released. */
static CUresult scrub(int fd, uint64_t dst, uint64_t n)
{
	static char buf[1 << 16];

	memset(buf, 0xa5, sizeof(buf));
	for (uint64_t done = 0; done < n;) {
		size_t k = n - done < sizeof(buf) ? (size_t)(n - done) : sizeof(buf);
		if (pwrite(fd, buf, k, (off_t)(dst + done)) != (ssize_t)k)
			return CUDA_ERROR_OPERATING_SYSTEM;
		done += k;
	}
	return CUDA_SUCCESS;
}

#include "faults.c"
#include "frozen.c"

/* begin runs the fault hook and attaches; on success the caller owns fd. */
static CUresult begin(const char *op, int pid, int *fd, uint64_t *state)
{
	CUresult r = fault(op, pid);

	if (r)
		return r;
	hang_if_frozen(pid);
	return attach(pid, fd, state);
}

/* begin_in is begin for a transition that needs the process in state want:
 * otherwise the page is closed and the driver's ILLEGAL_STATE returned. */
static CUresult begin_in(const char *op, int pid, uint64_t want, int *fd, uint64_t *state)
{
	CUresult r = begin(op, pid, fd, state);

	if (r)
		return r;
	if (*state != want) {
		close(*fd);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	return CUDA_SUCCESS;
}

/* query reads the state of pid for a call that changes nothing. */
static CUresult query(const char *op, int pid, uint64_t *state)
{
	int fd;
	CUresult r = begin(op, pid, &fd, state);

	if (!r)
		close(fd);
	return r;
}

/* wait_idle waits for the application to leave its current CUDA call. */
static CUresult wait_idle(int fd, unsigned int timeout_ms)
{
	uint64_t start = now_ms(), busy = 1;

	for (;;) {
		if (get_u64(fd, FIELD(busy), &busy))
			return CUDA_ERROR_INVALID_VALUE;
		if (!busy)
			return CUDA_SUCCESS;
		if (timeout_ms && now_ms() - start >= timeout_ms)
			return CUDA_ERROR_TIMEOUT;
		usleep(1000);
	}
}

EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
	unsigned int timeout = args ? args->timeoutMs : 0;
	uint64_t state;
	int fd;
	CUresult r = begin_in("lock", pid, FAKECU_RUNNING, &fd, &state);

	if (r)
		return r;
	put_u64(fd, FIELD(state), FAKECU_LOCKED);
	r = wait_idle(fd, timeout);
	if (r) {
		put_u64(fd, FIELD(state), FAKECU_RUNNING);
	} else {
		put_u64(fd, FIELD(lock_timeout), timeout);
		bump(fd, FIELD(locks));
	}
	close(fd);
	return r;
}

EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
	uint64_t state, dev = 0, save = 0, size = 0;
	int fd;
	CUresult r = begin_in("checkpoint", pid, FAKECU_LOCKED, &fd, &state);

	(void)args;
	if (r)
		return r;
	get_u64(fd, FIELD(dev_addr), &dev);
	get_u64(fd, FIELD(save_addr), &save);
	get_u64(fd, FIELD(dev_size), &size);
	if (size && !(r = copy_mem(fd, save, dev, size)))
		r = scrub(fd, dev, size);
	if (!r) {
		put_u64(fd, FIELD(state), FAKECU_CHECKPOINTED);
		bump(fd, FIELD(checkpoints));
	}
	close(fd);
	return r;
}

/* record_pairs keeps the last gpuPairs in the page so tests can see them. */
static void record_pairs(int fd, const CUcheckpointRestoreArgs *args)
{
	unsigned int n = args && args->gpuPairs ? args->gpuPairsCount : 0;
	unsigned int k = n < FAKECU_MAX_PAIRS ? n : FAKECU_MAX_PAIRS;
	uint8_t zero[sizeof(((struct fakecu_page *)0)->pairs)] = {0};
	off_t at = (off_t)(FAKECU_PAGE_ADDR + FIELD(pairs));

	if (pwrite(fd, zero, sizeof(zero), at) < 0)
		return;
	if (k && pwrite(fd, args->gpuPairs, k * sizeof(CUcheckpointGpuPair), at) < 0)
		return;
	put_u64(fd, FIELD(pairs_count), n);
}

EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
	uint64_t state, dev = 0, save = 0, size = 0;
	int fd;
	CUresult r = begin_in("restore", pid, FAKECU_CHECKPOINTED, &fd, &state);

	if (r)
		return r;
	if (args && args->gpuPairsCount && !args->gpuPairs) {
		close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	get_u64(fd, FIELD(dev_addr), &dev);
	get_u64(fd, FIELD(save_addr), &save);
	get_u64(fd, FIELD(dev_size), &size);
	if (size)
		r = copy_mem(fd, dev, save, size);
	if (!r) {
		record_pairs(fd, args);
		put_u64(fd, FIELD(restore_pid), (uint64_t)pid);
		put_u64(fd, FIELD(state), FAKECU_LOCKED);
		bump(fd, FIELD(restores));
	}
	close(fd);
	return r;
}

EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
	uint64_t state;
	int fd;
	CUresult r = begin_in("unlock", pid, FAKECU_LOCKED, &fd, &state);

	(void)args;
	if (r)
		return r;
	put_u64(fd, FIELD(state), FAKECU_RUNNING);
	bump(fd, FIELD(unlocks));
	close(fd);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState *out)
{
	uint64_t state;
	CUresult r;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	r = query("state", pid, &state);
	if (r)
		return r;
	*out = (CUprocessState)state;
	return CUDA_SUCCESS;
}

/* The fake has no restore thread of its own; the main thread stands in. */
EXPORT CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
	uint64_t state;
	CUresult r;

	if (!tid)
		return CUDA_ERROR_INVALID_VALUE;
	r = query("tid", pid, &state);
	if (r)
		return r;
	*tid = pid;
	return CUDA_SUCCESS;
}
