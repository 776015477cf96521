"""allreduce: a 2-rank (or N-rank) NCCL job that checks every all-reduce.

One launcher process starts WORLD ranks (one process per GPU, as torchrun
does), so the whole job is one process tree: a container, or a tree that
`cryo checkpoint --pid` takes. Every tick, each rank all-reduces a tensor
whose expected sum it knows and prints

    tick N rank=R allreduce=OK

A wrong sum prints allreduce=BAD and exits 3. With the default NCCL
settings, NCCL moves data between the GPUs through CUDA IPC (P2P, SHM or
cuMem transports); with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
NCCL_CUMEM_ENABLE=0 in the environment it uses sockets only.

Usage: allreduce.py [WORLD [PORT [INTERVAL_MS [MIB]]]]   (2, 29511, 300, 64)
"""
import os
import subprocess
import sys
import time


def rank_main(rank, world, port, interval, mib):
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=world)
    n = mib * (1 << 20) // 4
    base = torch.arange(n, device="cuda", dtype=torch.float32) % 1024
    tick = 0
    while True:
        x = base + float(rank + 1 + tick % 7)
        dist.all_reduce(x)
        want = base * world + float(sum(r + 1 for r in range(world)) + world * (tick % 7))
        ok = torch.equal(x, want)
        tick += 1
        print(f"tick {tick} rank={rank} allreduce={'OK' if ok else 'BAD'}", flush=True)
        if not ok:
            sys.exit(3)
        time.sleep(interval / 1000.0)


def launch(world, port, interval, mib):
    env = dict(os.environ)
    # NVLink multicast stays off (the GPU hosts require it).
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        env.setdefault(k, v)
    ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(world), str(port), str(interval), str(mib)], env=env)
             for r in range(world)]
    print(f"allreduce launcher pid={os.getpid()} ranks={[p.pid for p in ranks]}", file=sys.stderr, flush=True)
    code = 0
    for p in ranks:
        code = code or p.wait()
    sys.exit(code)


def main():
    args = sys.argv[1:]
    if args and args[0] == "--rank":
        r = int(args[1])
        world, port, interval, mib = (int(a) for a in args[2:6])
        rank_main(r, world, port, interval, mib)
        return
    vals = [int(a) for a in args] + [2, 29511, 300, 64][len(args):]
    launch(*vals[:4])


if __name__ == "__main__":
    main()
