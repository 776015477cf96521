package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
)

// TestArchivesOf: the archives of the Checkpoint's container written
// since it was created are its own; older ones (an administrator's) and
// those of another pod, namespace or container are not.
func TestArchivesOf(t *testing.T) {
	dir := t.TempDir()
	created := time.Now().Add(-time.Minute)
	cp := &cryov1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", CreationTimestamp: metav1.NewTime(created)},
		Spec: cryov1.CheckpointSpec{PodName: "web", Container: "app"}}
	files := map[string]time.Time{
		"checkpoint-web_ns-app-2026-12-01T10:00:00Z.tar":  time.Now(),
		"checkpoint-web_ns-app-2026-11-30T10:00:00Z.tar":  created.Add(-time.Hour),
		"checkpoint-web_ns2-app-2026-12-01T10:00:00Z.tar": time.Now(),
		"checkpoint-web_ns-db-2026-12-01T10:00:00Z.tar":   time.Now(),
		"checkpoint-web2_ns-app-2026-12-01T10:00:00Z.tar": time.Now(),
		// Pod web of namespace ns, container app-x: not container app's.
		"checkpoint-web_ns-app-x-2026-12-01T10:00:00Z.tar": time.Now(),
	}
	for name, mtime := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	r := &Reconciler{ArchiveDir: dir}
	got := r.archivesOf(cp)
	want := []string{filepath.Join(dir, "checkpoint-web_ns-app-2026-12-01T10:00:00Z.tar")}
	if !slices.Equal(got, want) {
		t.Errorf("archives %v, want %v", got, want)
	}
}
