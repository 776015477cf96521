#!/usr/bin/env python3
"""bench_report.py HOST_TSV BENCH_TSV TABLE_MD PLOT_PNG [MORE_TSV...]: the
tables and the plot of `make bench` from TestBenchGPU's rows (workload,
size_mib, figure, value: seconds, or bytes where the figure says so), and
from the rows of the other benchmarks (TestBenchCRIU, ...) in MORE_TSV."""
import sys
import statistics
from collections import OrderedDict, defaultdict


def load_all(path):
    """Every row, repeated figures kept: (workload, mib) -> figure -> [values],
    the keys in the order they first came. A missing file has no rows."""
    rows = defaultdict(lambda: defaultdict(list))
    try:
        lines = open(path).readlines()
    except OSError:
        return rows
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) == 4:
            rows[(parts[0], int(parts[1]))][parts[2]].append(float(parts[3]))
    return rows


def med(vals):
    return statistics.median(vals) if vals else None


def criu_section(rows):
    """TestBenchCRIU: one image restored by stock and by cryo's CRIU in turn."""
    keys = sorted(k for k in rows if "criu restore: stock" in rows[k])
    if not keys:
        return []
    kinds = ("stock", "patched", "patched, CRYO_CRIU_FILL_THREADS=1", "patched, CRYO_CRIU_HUGE_FILL=0")
    out = ["\nCRIU's restore of one image of a process with that much private memory, stock CRIU against cryo's (contrib/criu) with both of its fills, with huge pages only (`CRYO_CRIU_FILL_THREADS=1`) and with threads only (`CRYO_CRIU_HUGE_FILL=0`), in turn, page cache warm; median of the rounds (all rounds in brackets):\n",
           "| memory | stock | cryo's CRIU | cryo/stock | huge pages only | threads only |", "|---|---|---|---|---|---|"]
    rng = lambda v: s(med(v)) + (" (" + ", ".join(f"{x:.2f}" for x in v) + ")" if len(v) > 1 else "")
    for k in keys:
        a, b, c, d = (rows[k].get("criu restore: " + n, []) for n in kinds)
        out.append(f"| {k[1] / 1024:g} GiB | {rng(a)} | {rng(b)} | {ratio(med(b), med(a))} | {rng(c)} | {rng(d)} |")
    return out


def shim_section(rows):
    """TestBenchShim: cryo-runc against the shim's routes, one container."""
    keys = sorted(k for k in rows if "cryo-runc checkpoint" in rows[k])
    if not keys:
        return []
    out = ["\nThe same container through cryo-runc and through containerd with cryo's shim (page cache dropped before each checkpoint):\n",
           "| workload | memory | route | checkpoint | /cryo-runc | restore to first output | /cryo-runc |", "|---|---|---|---|---|---|---|"]
    parts = []
    for k in keys:
        r = {f: med(v) for f, v in rows[k].items()}
        base_c, base_r = r.get("cryo-runc checkpoint"), r.get("cryo-runc restore to first output")
        for route in ("cryo-runc", "shim image path", "shim content store", "CRI runnable"):
            c, rr = r.get(route + " checkpoint"), r.get(route + " restore to first output")
            if route == "cryo-runc" or c is not None or rr is not None:
                out.append(f"| {k[0]} | {k[1] / 1024:g} GiB | {route} | {s(c)} | {ratio(c, base_c)} | {s(rr)} | {ratio(rr, base_r)} |")
        b, rr = r.get("cryo image build --containerd"), r.get("cryo image restore --containerd to first output")
        if b is not None or rr is not None:
            out.append(f"| {k[0]} | {k[1] / 1024:g} GiB | `cryo image build` / `image restore --containerd` | {s(b)} | {ratio(b, base_c)} | {s(rr)} | {ratio(rr, base_r)} |")
        parts += cri_parts(k, r)
    return out + parts


def cri_parts(key, r):
    """The CRI route's steps and the restore's parts in the shim, one line."""
    if "CRI runnable restore to first output" not in r:
        return []
    g = lambda name: r.get("CRI runnable " + name)
    steps = [("build", s(g("build"))), ("image with its base", gb(g("image bytes with its base"))), ("push", s(g("push"))),
             ("CRI PullImage (not part of the restore)", s(g("pull"))),
             ("the shim's read of the checkpoint from containerd's content store", s(g("restore: shim read"))),
             ("of it linked", gb(g("restore: shim linked bytes"))), ("runc's restore (CRIU)", s(g("restore: shim CRIU restore"))),
             ("the CUDA resume", s(g("restore: shim CUDA resume"))), ("the shim's restore in all", s(g("restore: shim total")))]
    return [f"\nThe CRI route, {key[0]} {key[1] / 1024:g} GiB (CheckpointContainer, `cryo image build --runnable`, push, PullImage, a new pod restored): "
            + ", ".join(f"{n} {v}" for n, v in steps if v != "—")]


def llm_section(rows, order):
    """The transformers server at full size: every figure of cryo and of the
    raw sequence side by side, then the cold start against both restores."""
    out = []
    for key in [k for k in order if k[0] == "llm"]:
        g = rows[key].get
        out += [f"\nThe transformers inference server (llmserve), {key[1] / 1024:.1f} GiB of GPU memory: cryo and the raw sequence (the driver, plain runc, stock CRIU) side by side; the cold start and the restores with the page cache dropped read the weights or the image from disk:\n",
                "| figure | cryo | raw | cryo/raw |", "|---|---|---|---|"]
        for name, a, b, fmt in (
                ("checkpoint", "cryo checkpoint", "raw checkpoint", s),
                ("GPU free after the checkpoint began", "cryo GPU free", "raw GPU free", s),
                ("driver suspend", "cryo checkpoint step: suspend", "raw driver suspend", s),
                ("dump", "cryo checkpoint step: dump", "raw runc checkpoint", s),
                ("image", "cryo image bytes", "raw image bytes", gb),
                ("restore to first answer, page cache warm", "cryo restore to first output", "raw restore to first output", s),
                ("restore to first answer, page cache dropped", "cryo restore to first output, page cache dropped", "raw restore to first output, page cache dropped", s),
                ("cold start to first answer, page cache dropped", "cold start to first answer, page cache dropped", None, s)):
            va = g(a)
            vb = g(b) if b else None
            out.append(f"| {name} | {fmt(va)} | {fmt(vb) if b else '—'} | {ratio(va, vb)} |")
        cold = g("cold start to first answer, page cache dropped")
        for mode in ("cryo", "raw"):
            r = g(mode + " restore to first output, page cache dropped")
            if cold and r:
                out.append(f"\n{mode}: cold start / restore from a cold page cache = {cold / r:.2f}×")
        hooked = [(name, g(a), g("cryo with sleep hook " + b), fmt) for name, a, b, fmt in (
            ("checkpoint", "cryo checkpoint", "checkpoint", s),
            ("GPU free after the checkpoint began", "cryo GPU free", "GPU free", s),
            ("image", "cryo image bytes", "image bytes", gb),
            ("restore to first answer, page cache warm", "cryo restore to first output", "restore to first output", s),
            ("restore to first answer, page cache dropped", "cryo restore to first output, page cache dropped", "restore to first output, page cache dropped", s))]
        if any(h for _, _, h, _ in hooked):
            out += ["\nWith the server's sleep and wake endpoints as the container's hooks (cryo.io/pre-checkpoint POST /sleep?level=1, cryo.io/post-restore POST /wake_up; the first answer comes after the wake):\n",
                    "| figure | cryo | cryo with sleep hook | hook/plain |", "|---|---|---|---|"]
            out += [f"| {name} | {fmt(a)} | {fmt(h)} | {ratio(h, a)} |" for name, a, h, fmt in hooked]
        for suffix, label in (("", "page cache warm"), (", page cache dropped", "page cache dropped"), (", sleep hook", "sleep hook"),
                              (", sleep hook, page cache dropped", "sleep hook, page cache dropped")):
            rs = [(k[len("cryo restore step: "):-len(suffix) or None], v) for k, v in rows[key].items()
                  if k.startswith("cryo restore step: ") and k.endswith(suffix)
                  and (suffix or "page cache" not in k) and ("sleep hook" in suffix or "sleep hook" not in k)]
            if rs:
                out.append(f"\ncryo's restore steps ({label}): " + ", ".join(f"{n} {v:.2f} s" for n, v in rs))
        steps = [(k[len("cold start step: "):], v) for k, v in rows[key].items() if k.startswith("cold start step: ")]
        if steps:
            out.append("\nCold start (the server's own clock, last start): " + ", ".join(f"{n} {v:.2f} s" for n, v in steps))
    return out


def table(rows, order, marker, intro, columns, row):
    """One optional table: the workloads that have the figure marker, one
    row each from row(key, getter), after the workload and its size."""
    keys = [k for k in order if marker in rows[k]]
    if not keys:
        return []
    out = ["\n" + intro + "\n", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for key in keys:
        cells = row(key, rows[key].get)
        out.append(f"| {key[0]} | {key[1] / 1024:g} GiB | " + " | ".join(cells) + " |")
    return out


def load(path):
    """One value per figure (the last one given), and the keys in order."""
    every = load_all(path)
    rows = defaultdict(dict, {k: {f: v[-1] for f, v in figs.items()} for k, figs in every.items()})
    return rows, list(every)


def s(v):
    return "—" if v is None else f"{v:.2f} s"


def gb(v):
    return "—" if v is None else f"{v / 1e9:.2f} GB"


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def main():
    host_path, bench_path, table_path, png_path = sys.argv[1:5]
    host = OrderedDict(l.rstrip("\n").split("\t", 1) for l in open(host_path) if "\t" in l)
    rows, order = load(bench_path)
    # The CUDA workload by size first, then the rest as they came.
    order = sorted(order, key=lambda k: (k[0] != "cudamem", order.index(k) if k[0] != "cudamem" else k[1]))
    out = []
    out.append("Measured by `make bench` on " + ", ".join(f"{k} {v}" for k, v in host.items() if v) + ".\n")

    out.append("| workload | GPU memory | cryo checkpoint | raw checkpoint | cryo/raw | GPU free: cryo | GPU free: raw | cryo restore to first output | raw restore to first output | cryo/raw | cold start | image | zstd-fastest |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in order:
        w, mib = key
        r = rows[key]
        if "cryo checkpoint" not in r and "raw checkpoint" not in r:
            continue
        g = r.get
        out.append(f"| {w} | {mib / 1024:g} GiB | {s(g('cryo checkpoint'))} | {s(g('raw checkpoint'))} | "
                   f"{ratio(g('cryo checkpoint'), g('raw checkpoint'))} | {s(g('cryo GPU free'))} | {s(g('raw GPU free'))} | "
                   f"{s(g('cryo restore to first output'))} | {s(g('raw restore to first output'))} | "
                   f"{ratio(g('cryo restore to first output'), g('raw restore to first output'))} | "
                   f"{s(g('cold start to first answer'))} | {gb(g('image bytes'))} | {gb(g('image bytes zstd-fastest'))} |")

    out.append("\nWhere the time goes (seconds; cryo's checkpoint steps from its manifest, the raw sequence's parts timed apart):\n")
    out.append("| workload | GPU memory | " + " | ".join(["cryo: thaw+find+inventory", "cryo: suspend (driver)", "cryo: dump (runc/CRIU)", "cryo: digests", "cryo: other",
                                                     "raw: driver suspend", "raw: runc checkpoint", "cryo restore command", "raw: runc restore", "raw: driver resume"]) + " |")
    out.append("|---|---|" + "---|" * 10)
    for key in order:
        w, mib = key
        r = rows[key]
        st = {k[len("cryo checkpoint step: "):]: v for k, v in r.items() if k.startswith("cryo checkpoint step: ")}
        if not st and "raw driver suspend" not in r:
            continue
        pre = sum(st.get(k, 0) for k in ("thaw", "find", "inventory"))
        known = pre + sum(st.get(k, 0) for k in ("suspend", "dump", "digests"))
        other = r.get("cryo checkpoint", 0) - known if "cryo checkpoint" in r else None
        cells = [pre if st else None, st.get("suspend"), st.get("dump"), st.get("digests"), other,
                 r.get("raw driver suspend"), r.get("raw runc checkpoint"), r.get("cryo restore command"),
                 r.get("raw runc restore"), r.get("raw driver resume")]
        out.append(f"| {w} | {mib / 1024:g} GiB | " + " | ".join("—" if c is None else f"{c:.2f}" for c in cells) + " |")

    def cold_row(key, g):
        a, b = g("cold start to first answer, page cache dropped"), g("cryo restore to first output, page cache dropped")
        c = g("raw restore to first output, page cache dropped")
        return [s(a), s(b), ratio(a, b), s(c), ratio(b, c)]
    out += table(rows, order, "cold start to first answer, page cache dropped",
                 "The inference server with the page cache dropped before its cold start and before the restore:",
                 ["workload", "GPU memory", "cold start to first answer", "cryo restore to first output", "cold/restore", "raw restore to first output", "cryo/raw"],
                 cold_row)

    out += llm_section(rows, order)

    def pause_row(key, g):
        return [s(g("cryo pause")), s(g("cryo pause GPU free")), s(g("cryo resume to first output")),
                s(g("cryo restore to first output")), s(g("raw restore to first output")),
                ratio(g("cryo resume to first output"), g("raw restore to first output"))]
    out += table(rows, order, "cryo resume to first output",
                 "The GPU-free pause (`runc pause` through cryo-runc: CUDA suspended, then the container frozen) and its resume, against the restore of a checkpoint of the same workload:",
                 ["workload", "GPU memory", "pause", "GPU free after", "resume to first output", "cryo restore to first output", "raw restore to first output", "resume/raw restore"],
                 pause_row)

    def multi_row(key, g):
        return [s(g("cryo cuda suspend (sequential)")), s(g("cryo cuda suspend (parallel)")),
                ratio(g("cryo cuda suspend (sequential)"), g("cryo cuda suspend (parallel)")),
                s(g("cryo GPU free (sequential)")), s(g("cryo GPU free (parallel)")),
                s(g("cryo cuda resume (sequential)")), s(g("cryo cuda resume (parallel)")),
                ratio(g("cryo cuda resume (sequential)"), g("cryo cuda resume (parallel)"))]
    out += table(rows, order, "cryo cuda suspend (sequential)",
                 "Several CUDA processes, one `cryo cuda suspend`/`resume` call: the driver calls one process after another (`--parallel 1`), then all at once (the default):",
                 ["processes", "GPU memory in all", "suspend: sequential", "suspend: parallel", "speed-up", "GPU free: sequential", "GPU free: parallel",
                  "resume: sequential", "resume: parallel", "speed-up"],
                 multi_row)
    for extra in sys.argv[5:]:
        extra_rows = load_all(extra)
        out += criu_section(extra_rows) + shim_section(extra_rows)
    open(table_path, "w").write("\n".join(out) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    title = f"({host.get('device', '?')}, driver {host.get('driver', '?')}, {host.get('date', '?')[:10]})"
    plot_lines(rows, order, title, png_path)
    plot_restore(rows, order, title, png_path[:-len(".png")] + "-restore.png")


def plot_lines(rows, order, title, path):
    """Checkpoint, restore and GPU free against the CUDA workload's size."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    series = [("cryo checkpoint", "o-"), ("raw checkpoint", "o--"), ("cryo restore to first output", "s-"),
              ("raw restore to first output", "s--"), ("cryo GPU free", "^-"), ("raw GPU free", "^--")]
    pts = sorted(k for k in order if k[0] == "cudamem")
    for fig_name, style in series:
        xs = [mib / 1024 for (_, mib) in pts if fig_name in rows[("cudamem", mib)]]
        ys = [rows[("cudamem", mib)][fig_name] for (_, mib) in pts if fig_name in rows[("cudamem", mib)]]
        if xs:
            ax.plot(xs, ys, style, label=fig_name)
    for key in order:
        if key[0] == "serve":
            r = rows[key]
            for fig_name, marker in (("cryo restore to first output", "*"), ("cold start to first answer", "X")):
                if fig_name in r:
                    ax.plot([key[1] / 1024], [r[fig_name]], marker, markersize=12, label=f"inference server: {fig_name}")
    ax.set_xlabel("GPU memory of the workload (GiB)")
    ax.set_ylabel("seconds")
    ax.set_title("cryo vs raw driver + runc " + title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_restore(rows, order, title, path):
    """Back to work: raw restore, cryo's restore, resume after a GPU-free pause, cold start, per workload."""
    import matplotlib.pyplot as plt
    bars = [("raw restore to first output", "raw restore"), ("cryo restore to first output", "cryo restore"),
            ("cryo resume to first output", "resume after a GPU-free pause"), ("cold start to first answer", "cold start")]
    keys = [k for k in order if "cryo restore to first output" in rows[k]]
    if not keys:
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(bars)
    for i, (fig_name, label) in enumerate(bars):
        xs = [n + (i - (len(bars) - 1) / 2) * width for n, k in enumerate(keys) if fig_name in rows[k]]
        ys = [rows[k][fig_name] for k in keys if fig_name in rows[k]]
        if xs:
            ax.bar(xs, ys, width, label=label)
            for x, y in zip(xs, ys):
                ax.annotate(f"{y:.1f}", (x, y), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(keys)), [f"{k[0]} {k[1] / 1024:g} GiB" for k in keys])
    ax.set_ylabel("seconds to first output")
    ax.set_title("back to work " + title, fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)

if __name__ == "__main__":
    main()
