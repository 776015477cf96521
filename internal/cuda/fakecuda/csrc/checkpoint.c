/*
 * checkpoint.c: the fake cuCheckpointProcess* entry points. Included by
 * fakecuda.c (one translation unit, so the build is one gcc line).
 *
 * These run in the caller's process and reach the target's state page
 * through /proc/PID/mem. They write single fields (and the GPU list, which
 * the application writes only at start-up), never the whole page, so they
 * never clobber the "busy" flag the application owns.
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

/* midway_ms: set by a "midway" fault (faults.c), taken at the first
 * halfway point of the call's work. */
static unsigned int midway_ms;

static void midway(uint64_t done, uint64_t n)
{
	if (midway_ms && done >= n / 2) {
		usleep((useconds_t)midway_ms * 1000);
		midway_ms = 0;
	}
}

/* copy_mem moves n bytes inside the target, from src to dst; pause: the
 * copy is where a "midway" fault waits (a restore's). */
static CUresult copy_mem(int fd, uint64_t dst, uint64_t src, uint64_t n, int pause)
{
	static char buf[1 << 16];

	for (uint64_t done = 0; done < n;) {
		if (pause)
			midway(done, n);
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
		midway(done, n);
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
static CUresult handshake(int fd, int pid);

/*
 * query reads the state of pid for a call that changes nothing. Like the
 * real driver (580), it needs the process's restore thread to answer:
 * a query about a process whose restore thread is stopped (SIGSTOP, a
 * ptrace stop) times out, so a caller that holds the process's threads
 * must let that thread run first.
 */
static CUresult query(const char *op, int pid, uint64_t *state)
{
	int fd;
	CUresult r = begin(op, pid, &fd, state);

	if (r)
		return r;
	r = handshake(fd, pid);
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

#define HANDSHAKE_MS 5000

/*
 * request asks the process's device thread (devices.c) to make its
 * /dev/nvidia* fds follow the state just written; returns the request's
 * generation, or 0 for a page without the handshake (layout < 2).
 */
static uint64_t request(int fd)
{
	uint64_t layout = 0, req = 0;

	if (get_u64(fd, FIELD(layout), &layout) || layout < 2 ||
	    get_u64(fd, FIELD(req_gen), &req) || put_u64(fd, FIELD(req_gen), req + 1))
		return 0;
	return req + 1;
}

/*
 * await_ack waits (up to HANDSHAKE_MS) for the device thread to acknowledge
 * request req: only then does the process hold the fds its state implies.
 * A failed open in the process is CUDA_ERROR_OPERATING_SYSTEM; a process
 * whose cgroup gets frozen meanwhile hangs the call, as every call does.
 */
static CUresult await_ack(int fd, int pid, uint64_t req)
{
	uint64_t start = now_ms(), ack = 0, err = 0;

	for (unsigned int n = 1; req; n++) {
		if (get_u64(fd, FIELD(ack_gen), &ack))
			return CUDA_ERROR_INVALID_VALUE; /* the process is gone */
		if (ack == req)
			break;
		if (now_ms() - start >= HANDSHAKE_MS)
			return CUDA_ERROR_TIMEOUT;
		if (n % 64 == 0)
			hang_if_frozen(pid);
		usleep(1000);
	}
	if (req && !get_u64(fd, FIELD(open_errno), &err) && err)
		return CUDA_ERROR_OPERATING_SYSTEM;
	return CUDA_SUCCESS;
}

static CUresult handshake(int fd, int pid)
{
	return await_ack(fd, pid, request(fd));
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
	if (size && !(r = copy_mem(fd, save, dev, size, 0)))
		r = scrub(fd, dev, size);
	if (!r) {
		put_u64(fd, FIELD(state), FAKECU_CHECKPOINTED);
		bump(fd, FIELD(checkpoints));
		/* Return only once the process has let go of its GPUs. */
		r = handshake(fd, pid);
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

/* The visible GPUs a page records, in CUDA order. */
struct gpu_list {
	struct fakecu_gpu gpu[FAKECU_MAX_GPUS];
	unsigned int n;
};

static CUresult read_gpus(int fd, struct gpu_list *l)
{
	uint64_t n = 0;

	memset(l, 0, sizeof(*l));
	if (get_u64(fd, FIELD(gpu_count), &n))
		return CUDA_ERROR_OPERATING_SYSTEM;
	l->n = n < FAKECU_MAX_GPUS ? (unsigned int)n : FAKECU_MAX_GPUS;
	if (l->n && pread(fd, l->gpu, l->n * sizeof(l->gpu[0]),
			  (off_t)(FAKECU_PAGE_ADDR + FIELD(gpus))) != (ssize_t)(l->n * sizeof(l->gpu[0])))
		return CUDA_ERROR_OPERATING_SYSTEM;
	return CUDA_SUCCESS;
}

static CUresult write_gpus(int fd, const struct gpu_list *l)
{
	size_t k = l->n * sizeof(l->gpu[0]);

	if (k && pwrite(fd, l->gpu, k, (off_t)(FAKECU_PAGE_ADDR + FIELD(gpus))) != (ssize_t)k)
		return CUDA_ERROR_OPERATING_SYSTEM;
	return CUDA_SUCCESS;
}

/* move_to points slot s at the caller's GPU i: its UUID and its node. */
static void move_to(struct gpu_list *l, unsigned int s, const struct fakegpu_table *t, int i)
{
	memcpy(l->gpu[s].uuid, t->gpu[i].raw, 16);
	l->gpu[s].minor = (uint64_t)t->gpu[i].minor;
}

/*
 * remap_pairs applies gpuPairs as driver 580 accepts them: a one-to-one map
 * over exactly the GPUs the process sees (each visible UUID once as an old
 * UUID, no other), onto distinct GPUs of this host. Anything else is
 * CUDA_ERROR_INVALID_VALUE, with l left for the caller to discard.
 */
static CUresult remap_pairs(struct gpu_list *l, const CUcheckpointGpuPair *pairs,
			    unsigned int count, const struct fakegpu_table *t)
{
	int used[FAKECU_MAX_GPUS] = {0}, dest[FAKECU_MAX_GPUS];

	if (count != l->n)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int k = 0; k < count; k++) {
		unsigned int s = 0;
		int i = fakegpu_by_raw(t, pairs[k].newUuid.bytes);

		while (s < l->n && (used[s] || memcmp(l->gpu[s].uuid, pairs[k].oldUuid.bytes, 16)))
			s++;
		if (s == l->n || i < 0)
			return CUDA_ERROR_INVALID_VALUE;
		for (unsigned int j = 0; j < k; j++)
			if (!memcmp(pairs[j].newUuid.bytes, pairs[k].newUuid.bytes, 16))
				return CUDA_ERROR_INVALID_VALUE;
		used[s] = 1;
		dest[s] = i;
	}
	for (unsigned int s = 0; s < l->n; s++)
		move_to(l, s, t, dest[s]);
	return CUDA_SUCCESS;
}

/* remap_same keeps every GPU, which must then exist on this host. */
static CUresult remap_same(struct gpu_list *l, const struct fakegpu_table *t)
{
	for (unsigned int s = 0; s < l->n; s++) {
		int i = fakegpu_by_raw(t, l->gpu[s].uuid);

		if (i < 0)
			return CUDA_ERROR_INVALID_VALUE;
		move_to(l, s, t, i);
	}
	return CUDA_SUCCESS;
}

/*
 * check_restore decides, before anything is touched, whether the restore
 * can go on, and computes to, the GPUs the process will run on, from from,
 * those it ran on. A process that shared memory through CUDA IPC is lost,
 * as with driver 580: its state turns failed and the call fails with
 * CUDA_ERROR_NOT_SUPPORTED.
 */
static CUresult check_restore(int fd, const CUcheckpointRestoreArgs *args,
			      const struct gpu_list *from, struct gpu_list *to)
{
	unsigned int count = args ? args->gpuPairsCount : 0;
	struct fakegpu_table t;
	uint64_t flags = 0;

	get_u64(fd, FIELD(flags), &flags);
	if (flags & FAKECU_IPC) {
		put_u64(fd, FIELD(state), FAKECU_FAILED);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (count && !args->gpuPairs)
		return CUDA_ERROR_INVALID_VALUE;
	*to = *from;
	fakegpu_load(&t); /* the caller's host: where the process restores */
	return count ? remap_pairs(to, args->gpuPairs, count, &t) : remap_same(to, &t);
}

/*
 * roll_back undoes a restore whose process could not open its new GPUs:
 * the old GPU list, a scrubbed device buffer (as after the checkpoint) and
 * the checkpointed state, so that the restore can be tried again. When the
 * process did answer, wait for it to close what it opened.
 */
static void roll_back(int fd, int pid, const struct gpu_list *from, int answered)
{
	uint64_t dev = 0, size = 0, req;

	write_gpus(fd, from);
	get_u64(fd, FIELD(dev_addr), &dev);
	get_u64(fd, FIELD(dev_size), &size);
	if (size)
		scrub(fd, dev, size);
	put_u64(fd, FIELD(state), FAKECU_CHECKPOINTED);
	req = request(fd);
	if (answered)
		await_ack(fd, pid, req);
}

/* restore_to moves the process onto to, brings its memory back, and waits
 * for it to open its (new) GPUs; the caller owns fd. */
static CUresult restore_to(int fd, int pid, const CUcheckpointRestoreArgs *args,
			   const struct gpu_list *from, const struct gpu_list *to)
{
	uint64_t dev = 0, save = 0, size = 0;
	CUresult r;

	get_u64(fd, FIELD(dev_addr), &dev);
	get_u64(fd, FIELD(save_addr), &save);
	get_u64(fd, FIELD(dev_size), &size);
	if ((r = write_gpus(fd, to)))
		return r;
	if (size && (r = copy_mem(fd, dev, save, size, 1))) {
		write_gpus(fd, from);
		return r;
	}
	record_pairs(fd, args);
	put_u64(fd, FIELD(restore_pid), (uint64_t)pid);
	put_u64(fd, FIELD(state), FAKECU_LOCKED);
	r = handshake(fd, pid);
	if (r) {
		roll_back(fd, pid, from, r != CUDA_ERROR_TIMEOUT);
		return r;
	}
	bump(fd, FIELD(restores));
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
	struct gpu_list from, to;
	uint64_t state;
	int fd;
	CUresult r = begin_in("restore", pid, FAKECU_CHECKPOINTED, &fd, &state);

	if (r)
		return r;
	r = read_gpus(fd, &from);
	if (!r)
		r = check_restore(fd, args, &from, &to);
	if (!r)
		r = restore_to(fd, pid, args, &from, &to);
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
/*
 * caller_tid finds, among pid's threads, the one whose id in the
 * process's own pid namespace is inner (the device thread records
 * gettid() there, inside a container), and returns its id as the caller
 * sees it, as the real driver answers (CRIU's CUDA plugin ptraces it).
 */
static int caller_tid(int pid, int inner)
{
	char path[96], line[256];
	struct dirent *e;
	DIR *d;
	int found = -1;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return -1;
	while (found < 0 && (e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/status", pid, e->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f)) {
			char *last;

			if (strncmp(line, "NSpid:", 6))
				continue;
			last = strrchr(line, '\t');
			if (last && atoi(last + 1) == inner)
				found = atoi(e->d_name);
			break;
		}
		fclose(f);
	}
	closedir(d);
	return found;
}

EXPORT CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
	uint64_t state;
	CUresult r;

	if (!tid)
		return CUDA_ERROR_INVALID_VALUE;
	int fd;
	uint64_t rt = 0;

	r = begin("tid", pid, &fd, &state);
	if (r)
		return r;
	get_u64(fd, FIELD(restore_tid), &rt);
	close(fd);
	/* The thread the driver runs its checkpoint and restore actions on
	 * (the device thread), as the caller sees it; a page of layout 2 has
	 * none recorded. */
	*tid = rt ? caller_tid(pid, (int)rt) : pid;
	return *tid > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
