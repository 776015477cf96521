package harness

import (
	"path/filepath"
	"strings"
	"testing"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// confinedPod runs a cryo pod whose sandbox and container configs are
// edited by sb and ctr, with the container made from image.
func (n *CRINode) ConfinedPod(name, image string, sb func(*criapi.PodSandboxConfig), ctr func(*criapi.ContainerConfig)) (*CRIPod, error) {
	n.T.Helper()
	p := &CRIPod{N: n, Name: name, logDir: filepath.Join(n.Dir, "pods", name)}
	p.cfg = p.sandboxConfig()
	if sb != nil {
		sb(p.cfg)
	}
	ctx, cancel := n.Ctx()
	defer cancel()
	resp, err := n.Rt.RunPodSandbox(ctx, &criapi.RunPodSandboxRequest{Config: p.cfg, RuntimeHandler: CRIHandler})
	if err != nil {
		n.T.Fatalf("RunPodSandbox %s: %v\n%s", name, err, LastLines(n.Log(), 30))
	}
	p.ID = resp.PodSandboxId
	cfg := p.AppConfig(image)
	if ctr != nil {
		ctr(cfg)
	}
	if err := p.CreateWith(cfg); err != nil {
		return p, err
	}
	return p, p.Start()
}

// ckImage builds the archive into a runnable checkpoint image on the
// app's image in reg, pushes it and pulls it through CRI, as the kubelet
// pulls a pod's image; it returns the reference pinned by digest.
func (n *CRINode) CkImage(reg *ImgRegistry, archive, name string) string {
	n.T.Helper()
	ref := reg.Addr + "/ckpt/" + name + ":v1"
	builder := NewNode(n.T, nil)
	builder.Cryo(n.T, "image", "build", "--runnable", archive, ref)
	pinned := reg.Addr + "/ckpt/" + name + "@" + LastLine(builder.Cryo(n.T, "image", "push", ref))
	n.PullImage(pinned)
	return pinned
}

// ProcStatus parses /proc/<pid>/status.
func ProcStatus(t testing.TB, data string) map[string]string {
	t.Helper()
	fields := map[string]string{}
	for _, line := range strings.Split(data, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return fields
}
