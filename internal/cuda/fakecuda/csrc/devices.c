/*
 * devices.c: the GPUs of a fake CUDA process, on the application's side.
 * Included by fakecuda.c; everything here runs inside the application
 * (fakecuInit and a thread it starts), never in the driver's caller.
 *
 * Like the real driver (580), a process sees the GPUs whose device nodes
 * /dev/nvidia<minor> it can open, narrowed by CUDA_VISIBLE_DEVICES, and
 * holds each visible GPU's node open as long as it has GPU state. A
 * checkpoint releases the GPUs (the process then holds no /dev/nvidia* fd,
 * so CRIU never has to dump one) and a restore opens the GPUs the process
 * now runs on, which may be other ones. The real driver does that from a
 * thread of its own inside the process; the fake's device thread follows
 * the state page and answers the driver through the handshake described in
 * fakecuda.h.
 */
#include <pthread.h>
#include <signal.h>

#define FAKECU_MAX_NODE 64 /* probes /dev/nvidia0 ... /dev/nvidia63 */
#define DEVICE_THREAD_NAME "cuda-devfd"

/* The process's view of the host, filled by discover(). */
static struct fakegpu_table table;       /* the host's GPUs, from this process's environment */
static int universe[FAKEGPU_MAX];         /* table indices of the GPUs the process can open, table order */
static int universe_fd[FAKEGPU_MAX];      /* their probe fds, -1 without nodes */
static unsigned int nuniverse;
static int visible[FAKECU_MAX_GPUS];      /* indices into universe, CUDA's device order */
static unsigned int nvisible;
static int node_mode;                     /* found device nodes: holds fds for its GPUs */
static int devfd[FAKECU_MAX_GPUS];        /* held fd of each visible GPU, -1 when none */
static char device_list[FAKECU_MAX_GPUS * 41 + 1];

static int open_node(int minor)
{
	char path[32];

	snprintf(path, sizeof(path), "/dev/nvidia%d", minor);
	return open(path, O_RDWR | O_CLOEXEC);
}

/*
 * probe_nodes builds the universe from the device nodes the process can
 * open, in table order. A node whose minor is not in the table is no GPU
 * of this host: ignored. Without any usable node the process runs on a
 * host without device isolation and sees every GPU of the table.
 */
static void probe_nodes(void)
{
	int fd_of[FAKEGPU_MAX];

	for (unsigned int i = 0; i < FAKEGPU_MAX; i++)
		fd_of[i] = -1;
	for (int m = 0; m < FAKECU_MAX_NODE; m++) {
		int fd = open_node(m), i;

		if (fd < 0)
			continue;
		i = fakegpu_by_minor(&table, m);
		if (i < 0 || fd_of[i] >= 0) {
			close(fd);
			continue;
		}
		fd_of[i] = fd;
	}
	nuniverse = 0;
	for (unsigned int i = 0; i < table.n; i++)
		if (fd_of[i] >= 0) {
			universe[nuniverse] = (int)i;
			universe_fd[nuniverse++] = fd_of[i];
		}
	node_mode = nuniverse > 0;
	if (node_mode)
		return;
	for (unsigned int i = 0; i < table.n; i++) {
		universe[nuniverse] = (int)i;
		universe_fd[nuniverse++] = -1;
	}
}

static const struct fakegpu *universe_gpu(unsigned int u)
{
	return &table.gpu[universe[u]];
}

/*
 * pick resolves one CUDA_VISIBLE_DEVICES token as CUDA does: an index into
 * the GPUs the process can open, or a GPU UUID ("GPU-..."), whole or a
 * prefix that names exactly one GPU. Returns the universe index or -1.
 */
static int pick(const char *tok)
{
	char *end;
	long i;
	int found = -1;

	if (*tok >= '0' && *tok <= '9') {
		i = strtol(tok, &end, 10);
		return *end || i >= (long)nuniverse ? -1 : (int)i;
	}
	if (strncmp(tok, "GPU-", 4) != 0 || strlen(tok) < 5)
		return -1;
	for (unsigned int u = 0; u < nuniverse; u++) {
		if (strncmp(universe_gpu(u)->uuid, tok, strlen(tok)) != 0)
			continue;
		if (found >= 0)
			return -1; /* ambiguous prefix */
		found = (int)u;
	}
	return found;
}

static char *trim(char *s)
{
	char *e = s + strlen(s);

	while (*s == ' ' || *s == '\t')
		s++;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		*--e = 0;
	return s;
}

/*
 * apply_visible narrows the universe by CUDA_VISIBLE_DEVICES: unset means
 * all; the list ends at the first token that names no GPU, or one already
 * named; set but empty means none.
 */
static void apply_visible(void)
{
	const char *env = getenv("CUDA_VISIBLE_DEVICES");
	char *copy, *rest, *tok;
	int taken[FAKEGPU_MAX] = {0};

	nvisible = 0;
	if (!env) {
		for (; nvisible < nuniverse && nvisible < FAKECU_MAX_GPUS; nvisible++)
			visible[nvisible] = (int)nvisible;
		return;
	}
	rest = copy = strdup(env);
	while (copy && (tok = strsep(&rest, ",")) && nvisible < FAKECU_MAX_GPUS) {
		int u = pick(trim(tok));

		if (u < 0 || taken[u])
			break;
		taken[u] = 1;
		visible[nvisible++] = u;
	}
	free(copy);
}

/* keep_visible_fds keeps the probe fds of the visible GPUs, closes the rest. */
static void keep_visible_fds(void)
{
	for (unsigned int s = 0; s < FAKECU_MAX_GPUS; s++)
		devfd[s] = s < nvisible ? universe_fd[visible[s]] : -1;
	for (unsigned int u = 0; u < nuniverse; u++) {
		int kept = 0;

		for (unsigned int s = 0; s < nvisible; s++)
			kept |= visible[s] == (int)u;
		if (!kept && universe_fd[u] >= 0)
			close(universe_fd[u]);
	}
}

static void close_devices(void)
{
	for (unsigned int s = 0; s < FAKECU_MAX_GPUS; s++)
		if (devfd[s] >= 0) {
			close(devfd[s]);
			devfd[s] = -1;
		}
}

/* discover decides which GPUs the process sees; returns how many. */
static unsigned int discover(void)
{
	fakegpu_load(&table);
	probe_nodes();
	apply_visible();
	keep_visible_fds();
	device_list[0] = 0;
	for (unsigned int s = 0; s < nvisible; s++) {
		if (s)
			strcat(device_list, ",");
		strncat(device_list, universe_gpu(visible[s])->uuid, 40);
	}
	return nvisible;
}

/* record_gpus writes the visible GPUs into the (new) state page. */
static void record_gpus(struct fakecu_page *p)
{
	for (unsigned int s = 0; s < nvisible; s++) {
		const struct fakegpu *g = universe_gpu(visible[s]);

		memcpy(p->gpus[s].uuid, g->raw, 16);
		p->gpus[s].minor = (uint64_t)g->minor;
		p->gpus[s].memory = 0;
	}
	p->gpu_count = nvisible;
	p->flags = node_mode ? FAKECU_HOLDS_DEVICES : 0;
}

/*
 * open_devices opens the node of every GPU the page now records (a restore
 * may have moved the process to other GPUs); returns 0 or the errno of the
 * first failed open, after which it holds none.
 */
static int open_devices(struct fakecu_page *p)
{
	uint64_t n = __atomic_load_n(&p->gpu_count, __ATOMIC_SEQ_CST);

	for (uint64_t s = 0; s < n && s < FAKECU_MAX_GPUS; s++) {
		devfd[s] = open_node((int)p->gpus[s].minor);
		if (devfd[s] < 0) {
			int err = errno;

			close_devices();
			return err ? err : EIO;
		}
	}
	return 0;
}

/*
 * follow_map makes the driver-mapped page follow the state: the real
 * driver's mappings into the process go with its GPU state at a
 * checkpoint and come back at the restore. A thread that touches them in
 * between (libcuda's own threads do, outside any API call) faults, which
 * is why no thread but the restore thread may run while a process is
 * checkpointed.
 */
static void follow_map(struct fakecu_page *p, int checkpointed)
{
	void *m = (void *)(uintptr_t)__atomic_load_n(&p->devmap_addr, __ATOMIC_SEQ_CST);

	if (m)
		mprotect(m, FAKECU_PAGE_SIZE, checkpointed ? PROT_NONE : PROT_READ);
}

/* follow_state makes the held fds match the state; returns an errno or 0. */
static int follow_state(struct fakecu_page *p)
{
	int checkpointed = __atomic_load_n(&p->state, __ATOMIC_SEQ_CST) == FAKECU_CHECKPOINTED;

	close_devices();
	follow_map(p, checkpointed);
	if (checkpointed)
		return 0;
	if (!(__atomic_load_n(&p->flags, __ATOMIC_SEQ_CST) & FAKECU_HOLDS_DEVICES))
		return 0;
	return open_devices(p);
}

/*
 * device_thread answers the driver's requests (fakecuda.h): it polls, since
 * the driver's caller is another process that can only write our memory.
 * It blocks every signal so that the application's signals keep going to
 * the application's own threads.
 */
static void *device_thread(void *arg)
{
	struct fakecu_page *p = arg;
	struct timespec ms = {0, 1000000L};
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	__atomic_store_n(&p->restore_tid, (uint64_t)gettid(), __ATOMIC_SEQ_CST);
	for (;;) {
		uint64_t req = __atomic_load_n(&p->req_gen, __ATOMIC_SEQ_CST);

		if (req != __atomic_load_n(&p->ack_gen, __ATOMIC_SEQ_CST)) {
			__atomic_store_n(&p->open_errno, (uint64_t)follow_state(p), __ATOMIC_SEQ_CST);
			__atomic_store_n(&p->ack_gen, req, __ATOMIC_SEQ_CST);
		}
		nanosleep(&ms, NULL);
	}
	return NULL;
}

/*
 * touch_thread reads the driver-mapped page every millisecond, outside any
 * CUDA call, as libcuda's own threads read their mappings. Run while the
 * process is checkpointed, it faults (SIGSEGV) and the process dies, as a
 * real CUDA process does: the fake's way of catching a thread that runs
 * while its GPU state is away. On unless CRYO_FAKE_TOUCH=0 is in the
 * application's environment: every test that runs the fake application
 * checks that no thread of it runs between the driver's checkpoint and
 * the end of its restore.
 */
static void *touch_thread(void *arg)
{
	struct fakecu_page *p = arg;
	volatile const uint64_t *m = (const uint64_t *)(uintptr_t)p->devmap_addr;
	struct timespec ms = {0, 1000000L};

	for (;;) {
		(void)*m;
		__atomic_add_fetch(&p->touches, 1, __ATOMIC_RELAXED);
		nanosleep(&ms, NULL);
	}
	return NULL;
}

static int start_touch_thread(struct fakecu_page *p)
{
	const char *on = getenv("CRYO_FAKE_TOUCH");
	void *m;
	pthread_t t;

	if (on && strcmp(on, "0") == 0)
		return 0;
	m = mmap(NULL, FAKECU_PAGE_SIZE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -1;
	p->devmap_addr = (uint64_t)(uintptr_t)m;
	if (pthread_create(&t, NULL, touch_thread, p))
		return -1;
	pthread_setname_np(t, "fakecu-touch");
	pthread_detach(t);
	return 0;
}

static int start_device_thread(struct fakecu_page *p)
{
	pthread_t t;

	if (pthread_create(&t, NULL, device_thread, p))
		return -1;
	pthread_setname_np(t, DEVICE_THREAD_NAME);
	pthread_detach(t);
	return 0;
}
