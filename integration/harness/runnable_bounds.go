package harness

import (
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// removeImage removes ref's image (every name of its image ID) through
// CRI, as the kubelet's image GC does.
func (n *CRINode) RemoveImage(ref string) {
	n.T.Helper()
	ctx, cancel := n.Ctx()
	defer cancel()
	if _, err := n.images.RemoveImage(ctx, &criapi.RemoveImageRequest{Image: &criapi.ImageSpec{Image: ref}}); err != nil {
		n.T.Fatalf("CRI RemoveImage %s: %v", ref, err)
	}
}
