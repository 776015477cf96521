package cli

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cli/inspect"
	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// TestInspectDetails checkpoints netserver holding a file (fd 3), a
// listening UNIX socket (fd 4), its TCP and UDP sockets and one
// established connection, with `cryo checkpoint --tcp-established`.
func TestInspectDetails(t *testing.T) {
	harness.RequireRoot(t)
	tmp := t.TempDir()
	held, err := os.Create(filepath.Join(tmp, "held.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sockPath := filepath.Join(tmp, "app.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: sockPath, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	usock, err := ul.File()
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(testsupport.FreePort(t))
	p := harness.StartBare(t, nil, []*os.File{held, usock}, netServerBin(t)+" "+port+" </dev/null")
	// The server holds them alone: CRIU dumps what no process outside the
	// tree shares.
	held.Close()
	usock.Close()
	ul.Close()
	c := harness.DialServer(t, "127.0.0.1:"+port)
	if n := c.MustPing(); n != 1 {
		t.Fatalf("first answer %d", n)
	}

	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img, "--tcp-established")
	harness.WaitFor(t, 10*time.Second, "the dumped server to go", func() bool { return !p.Alive() })

	sum, err := ociimage.InspectPath(img)
	if err != nil {
		t.Fatal(err)
	}
	checkInspectDetails(t, sum, p.PID, port, held.Name(), sockPath)
	var text strings.Builder
	if err := inspect.WriteDetails(&text, sum); err != nil {
		t.Fatal(err)
	}
	t.Logf("inspect details:\n%s", text.String())
	if err := ociimage.VerifyPath(img, t.TempDir()); err != nil {
		t.Fatalf("verify the fresh checkpoint: %v", err)
	}

	// The CLI prints the same summary as JSON.
	var fromCLI ociimage.Summary
	out := harness.BareCryo(t, nil, "inspect", "--json", img)
	if err := json.Unmarshal([]byte(out), &fromCLI); err != nil {
		t.Fatalf("cryo inspect --json: %v\n%s", err, out)
	}
	checkInspectDetails(t, &fromCLI, p.PID, port, held.Name(), sockPath)
}

func checkInspectDetails(t *testing.T, sum *ociimage.Summary, pid int, port, heldPath, sockPath string) {
	t.Helper()
	if v := sum.Versions; v.Cryo == "" || !strings.HasPrefix(v.CRIU, "4.") || v.Kernel == "" {
		t.Errorf("versions = %+v, want cryo's, CRIU's and the kernel's", v)
	}
	d := sum.Details
	if d == nil {
		t.Fatalf("no details: %s", sum.DetailsNote)
	}
	if len(d.Processes) != 1 {
		t.Fatalf("processes = %+v, want the server alone", d.Processes)
	}
	sp := d.Processes[0]
	if sp.PID != pid || sp.Comm != "netserver" || len(sp.Cmdline) != 2 || sp.Cmdline[0] != netServerBin(t) || sp.Cmdline[1] != port {
		t.Errorf("process = pid %d comm %q cmdline %q, want pid %d, netserver %s", sp.PID, sp.Comm, sp.Cmdline, pid, port)
	}
	if !slices.ContainsFunc(sp.Files, func(f criuimg.File) bool { return f.FD == 3 && f.Type == "REG" && f.Path == heldPath }) {
		t.Errorf("files = %+v, want fd 3 on %s", sp.Files, heldPath)
	}
	n, _ := strconv.Atoi(port)
	want := map[string]func(criuimg.Socket) bool{
		"TCP listener": func(s criuimg.Socket) bool { return s.Protocol == "TCP" && s.State == "LISTEN" && s.SrcPort == n },
		"TCP connection": func(s criuimg.Socket) bool {
			return s.State == "ESTABLISHED" && s.SrcPort == n && s.Dst == "127.0.0.1" && s.DstPort != 0
		},
		"UDP socket": func(s criuimg.Socket) bool { return s.Protocol == "UDP" && s.SrcPort == n },
		"UNIX listener": func(s criuimg.Socket) bool {
			return s.FD == 4 && s.Family == "UNIX" && s.State == "LISTEN" && s.Src == sockPath
		},
	}
	for what, match := range want {
		if !slices.ContainsFunc(sp.Sockets, match) {
			t.Errorf("no %s among the sockets %+v", what, sp.Sockets)
		}
	}
	if s := d.DumpStats; s == nil || s.PagesWritten == 0 || s.FrozenUS == 0 {
		t.Errorf("dump stats = %+v", s)
	}
	if d.Memory.PagesBytes == 0 || d.Memory.PagesFileBytes == 0 {
		t.Errorf("memory = %+v", d.Memory)
	}
}

// TestInspectImage: a checkpoint image in a registry is inspected from its
// manifest (its digest, the versions from its annotations, and a note that
// the details need a pull); once pulled, the local store's image shows the
// details read from its small layers, and verifies.
func TestInspectImage(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	reg := harness.StartRegistry(t)
	a, b := harness.NewNode(t, env), harness.NewNode(t, env)
	_, dir, _ := harness.CheckpointApp(t, env)
	ref := reg.Addr + "/ckpt/inspect:v1"
	a.Cryo(t, "image", "build", dir, ref)
	a.Cryo(t, "image", "push", ref)

	remote := inspectJSON(t, b, ref)
	if !strings.HasPrefix(remote.Digest, "sha256:") || remote.Details != nil || !strings.Contains(remote.DetailsNote, "cryo image pull") {
		t.Errorf("registry image: digest %q, details %v, note %q", remote.Digest, remote.Details != nil, remote.DetailsNote)
	}
	if v := remote.Versions; v.Cryo == "" || v.CRIU == "" || v.Kernel == "" || v.Driver == "" {
		t.Errorf("registry image versions = %+v, want all four from the annotations", v)
	}

	b.Cryo(t, "image", "pull", ref)
	local := inspectJSON(t, b, ref)
	if local.Digest != remote.Digest || local.Versions != remote.Versions {
		t.Errorf("local image: digest %q versions %+v, want the registry's %q %+v", local.Digest, local.Versions, remote.Digest, remote.Versions)
	}
	if d := local.Details; d == nil || len(d.Processes) != 1 || d.Processes[0].Comm != "fakecuda-app" || d.DumpStats == nil {
		t.Errorf("local image details = %+v (note %q)", local.Details, local.DetailsNote)
	}
	ctx := context.Background()
	st, err := ociimage.OpenStore(ctx, b.Store)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.VerifyLocal(ctx, ref, t.TempDir(), nil); err != nil {
		t.Errorf("verify the pulled image: %v", err)
	}
}

func inspectJSON(t *testing.T, n *harness.ImgNode, ref string) *ociimage.Summary {
	t.Helper()
	out := n.Cryo(t, "inspect", "--json", ref)
	var sum ociimage.Summary
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &sum); err != nil {
		t.Fatalf("cryo inspect --json %s: %v\n%s", ref, err, out)
	}
	return &sum
}
