package harness

import (
	"context"
	"time"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// publishApp pushes the node's test image to a registry on loopback as ref
// and pulls it back through CRI, as a node pulls a pod's image: the image
// then has a repo digest, which a CRI checkpoint records as the
// container's base image (RootfsImageRef) and containerd's CRI restore
// pulls by. containerd speaks plain HTTP to a registry on loopback.
func (n *CRINode) PublishApp(ref string) {
	n.T.Helper()
	n.CtrIn(CRINamespace, "images", "tag", TestImage, ref)
	n.CtrIn(CRINamespace, "images", "push", "--plain-http", ref)
	n.PullImage(ref)
}

// pullImage pulls ref through CRI, as the kubelet does for a pod's image.
func (n *CRINode) PullImage(ref string) {
	n.T.Helper()
	n.PullImageWithin(ref, CRICall)
}

// PullImageWithin is PullImage with a deadline of its own: a benchmark's
// image of many gigabytes takes longer than one CRI call's.
func (n *CRINode) PullImageWithin(ref string, within time.Duration) {
	n.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := n.images.PullImage(ctx, &criapi.PullImageRequest{Image: &criapi.ImageSpec{Image: ref}}); err != nil {
		n.T.Fatalf("CRI PullImage %s: %v\n%s", ref, err, LastLines(n.Log(), 20))
	}
}
