package ociimage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

// An export's config.dump and spec.dump give the container's id, runtime,
// creation time, annotations, environment and the host path of its bind
// mounts (CRIU records only the device, "unsupported /dev/vda").
func TestInspectContainerMeta(t *testing.T) {
	root := t.TempDir()
	tinyCheckpoint(t, root, checkpointDir)
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(configDumpName, `{"id":"0123456789abcdef","name":"web","runtime":"runc","createdTime":"2026-01-02T03:04:05Z","checkpointedTime":"2026-01-02T04:00:00Z"}`)
	write(SpecDumpName, `{"ociVersion":"1.0.2","process":{"cwd":"/","env":["PATH=/bin","API_TOKEN=s3cret"]},
		"annotations":{"io.kubernetes.pod.name":"web-0"},
		"mounts":[{"destination":"/mnt","type":"bind","source":"/srv/data","options":["rbind","rw"]},{"destination":"/proc","type":"proc","source":"proc"}]}`)
	sum, err := InspectPath(root)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ContainerID != "0123456789abcdef" || sum.Runtime != "runc" || sum.Name != "web" {
		t.Errorf("id %q runtime %q name %q", sum.ContainerID, sum.Runtime, sum.Name)
	}
	if sum.ContainerCreated == nil || sum.ContainerCreated.Format("15:04") != "03:04" || sum.Checkpointed != sum.Created {
		t.Errorf("created %v, checkpointed %v (checkpoint %v)", sum.ContainerCreated, sum.Checkpointed, sum.Created)
	}
	if sum.ContainerAnnotations["io.kubernetes.pod.name"] != "web-0" || len(sum.Env) != 2 || len(sum.Mounts) != 2 {
		t.Errorf("annotations %v env %v mounts %v", sum.ContainerAnnotations, sum.Env, sum.Mounts)
	}
	for _, m := range sum.Details.Mounts {
		want := map[string]string{"/mnt": "/srv/data"}[m.MountPoint]
		if m.HostSource != want {
			t.Errorf("mount %s: host source %q, want %q", m.MountPoint, m.HostSource, want)
		}
	}
}

// A cryo manifest that cannot be read is a corrupt checkpoint, not one
// taken without cryo.
func TestInspectCorruptManifest(t *testing.T) {
	dir := tinyCheckpoint(t, t.TempDir(), "ckpt")
	if err := os.WriteFile(filepath.Join(dir, manifest.ManifestName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := InspectPath(dir); !errors.Is(err, manifest.ErrCorrupt) {
		t.Fatalf("InspectPath of a corrupt manifest: %v, want ErrCorrupt", err)
	}
}

// A run stopped before CRIU's dump leaves cryo's manifest alone: inspect
// names the interruption instead of refusing the directory.
func TestInspectInterruptedBeforeDump(t *testing.T) {
	dir := t.TempDir()
	if err := manifest.Write(dir, manifest.New("pid 42")); err != nil {
		t.Fatal(err)
	}
	sum, err := InspectPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Unfinished || sum.Finishable || sum.Interruption != manifest.DumpNotStarted || sum.Kind != KindProcess {
		t.Errorf("summary %+v", sum)
	}
}

// cryo's manifest naming a container (not "pid N") marks a container's
// CRIU image directory (`ctr task checkpoint --image-path`).
func TestInspectImagePathKind(t *testing.T) {
	dir := tinyCheckpoint(t, t.TempDir(), "ckpt")
	sum, err := InspectPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Kind != KindImageDir || sum.ContainerID != "tiny" {
		t.Errorf("kind %q id %q, want %q and the manifest's container id", sum.Kind, sum.ContainerID, KindImageDir)
	}
}

// A GPU count annotation that is not a count is unreadable, never "none".
func TestFromManifestJunkGPUCount(t *testing.T) {
	for _, c := range []string{"x", "-1", "0", "99999999"} {
		sum := FromManifest(ocispec.Manifest{Annotations: map[string]string{AnnKind: "process", AnnGPUCount: c}})
		if sum.GPUsUnknown == "" || len(sum.GPUs) != 0 {
			t.Errorf("count %q: GPUs %v, unknown %q", c, sum.GPUs, sum.GPUsUnknown)
		}
	}
	sum := FromManifest(ocispec.Manifest{Annotations: map[string]string{AnnKind: "process"}})
	if sum.GPUsUnknown != "" {
		t.Errorf("no GPU annotation: unknown %q, want none needed", sum.GPUsUnknown)
	}
}

// A directory marked partial (its images removed, its logs kept) is
// described from its mark, not refused as an unknown source.
func TestInspectPartialMark(t *testing.T) {
	dir := tinyCheckpoint(t, t.TempDir(), "ckpt")
	os.WriteFile(filepath.Join(dir, "criu-dump.log"), []byte("Dumping finished successfully\n"), 0o600)
	if _, err := manifest.MarkPartial(dir, errors.New("failed at step manifest: no space left on device")); err != nil {
		t.Fatal(err)
	}
	sum, err := InspectPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Partial == nil || sum.Interruption != manifest.DumpStaleRemoved || !sum.Unfinished || sum.GPUsUnknown == "" {
		t.Errorf("summary %+v", sum)
	}
}
