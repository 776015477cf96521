package shim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/imagetrust"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// cryo's failures reach containerd with the gRPC code of their class, and
// their message intact.
func TestToGRPCClasses(t *testing.T) {
	cases := []struct {
		err          error
		precondition bool
		want         codes.Code
	}{
		{&lock.BusyError{Target: "container c1", Holder: "checkpoint of container c1", PID: 42}, false, codes.Unavailable},
		{fmt.Errorf("suspend: %w", cuda.ErrTimeout), false, codes.DeadlineExceeded},
		{fmt.Errorf("find: %w", cuda.ErrNoProcess), false, codes.NotFound},
		{fmt.Errorf("check: %w", manifest.ErrIncompatibleHost), false, codes.FailedPrecondition},
		{fmt.Errorf("verify: %w", manifest.ErrCorrupt), true, codes.DataLoss},
		{fmt.Errorf("criu: %w", fmt.Errorf("exit status 1")), true, codes.FailedPrecondition},
		{fmt.Errorf("criu: %w", fmt.Errorf("exit status 1")), false, codes.Unknown},
		{&report.StepError{Op: "restore", ID: "c1", Step: "pull the checkpoint image r", Err: fmt.Errorf("401: %w", ociimage.ErrTransfer)}, true, codes.Unavailable},
		{fmt.Errorf("layer: %w", ociimage.ErrIntegrity), true, codes.DataLoss},
		{fmt.Errorf("kind: %w", imagerestore.ErrNotContainerCheckpoint), true, codes.InvalidArgument},
		{fmt.Errorf("policy: %w", imagerestore.ErrBadAnnotation), true, codes.InvalidArgument},
		{fmt.Errorf("unpack: %w", ociimage.ErrNoSpace), true, codes.ResourceExhausted},
		{fmt.Errorf("unpack: %w", &archive.LimitError{Part: "checkpoint part p", What: archive.LimitEntries, Count: 2001, Cap: 2000}), true, codes.ResourceExhausted},
		{&report.StepError{Op: "restore", ID: "c1", Err: orchestrate.DeadlineExceededIn("unpack", time.Second, nil)}, true, codes.DeadlineExceeded},
		{fmt.Errorf("policy: %w", imagerestore.ErrNotAllowed), true, codes.PermissionDenied},
		{fmt.Errorf("verify: %w", imagetrust.ErrUnsigned), true, codes.PermissionDenied},
	}
	for _, c := range cases {
		got := status.Convert(toGRPC(c.err, c.precondition))
		if got.Code() != c.want {
			t.Errorf("%v: code %s, want %s", c.err, got.Code(), c.want)
		}
		if !strings.Contains(got.Message(), c.err.Error()) {
			t.Errorf("message %q lost %q", got.Message(), c.err)
		}
	}
}

// A refusal whose error joins several (a HostError wraps the host
// sentinel and the matcher's) reaches containerd's client as cryo's report
// once: no status details that the client appends as more lines.
func TestToGRPCMessageOnce(t *testing.T) {
	match := fmt.Errorf("%w: restore needs 1× NVIDIA H100 (sm_90); this host offers 1× NVIDIA A100 (sm_80)", cuda.ErrNoMatchingGPU)
	err := fmt.Errorf("restore of app failed at step verify: %w", &manifest.HostError{Detail: match.Error(), Err: match})
	got := errgrpc.ToNative(toGRPC(err, true))
	msg := got.Error()
	if strings.Contains(msg, "\n") || strings.Count(msg, "no matching GPU") != 1 || strings.Contains(msg, manifest.ErrIncompatibleHost.Error()) {
		t.Fatalf("client's message %q, want cryo's report once", msg)
	}
	if !errdefs.IsFailedPrecondition(got) {
		t.Fatalf("class %v, want failed precondition", got)
	}
}

// Every sentinel carries its containerd class where it is defined
// (report.Sentinel), so the shim keeps no table of other packages'
// errors: a new sentinel is one edit, in its own package. These are the
// classes the shim has always given, and the message is kept.
func TestSentinelsCarryTheirClass(t *testing.T) {
	for _, c := range []struct{ sentinel, class error }{
		{lock.ErrBusy, errdefs.ErrUnavailable},
		{cuda.ErrTimeout, context.DeadlineExceeded},
		{cuda.ErrNoProcess, errdefs.ErrNotFound},
		{cuda.ErrLibraryNotFound, errdefs.ErrFailedPrecondition},
		{cuda.ErrNoCheckpointAPI, errdefs.ErrFailedPrecondition},
		{cuda.ErrBadState, errdefs.ErrFailedPrecondition},
		{orchestrate.ErrNoCRIU, errdefs.ErrFailedPrecondition},
		{orchestrate.ErrDirInUse, errdefs.ErrAlreadyExists},
		{orchestrate.ErrDirNotEmpty, errdefs.ErrAlreadyExists},
		{manifest.ErrIncompatibleHost, errdefs.ErrFailedPrecondition},
		{manifest.ErrUnsupportedVersion, errdefs.ErrNotImplemented},
		{manifest.ErrIncomplete, errdefs.ErrDataLoss},
		{manifest.ErrCorrupt, errdefs.ErrDataLoss},
		{manifest.ErrNoManifest, errdefs.ErrInvalidArgument},
		{manifest.ErrNotCheckpoint, errdefs.ErrInvalidArgument},
		{imagerestore.ErrImageNotFound, errdefs.ErrNotFound},
		{ociimage.ErrNoSpace, errdefs.ErrResourceExhausted},
		{ociimage.ErrUnpackLimit, errdefs.ErrResourceExhausted},
		{orchestrate.ErrRestoreDeadline, context.DeadlineExceeded},
		{ociimage.ErrIntegrity, errdefs.ErrDataLoss},
		{ociimage.ErrPartsMismatch, errdefs.ErrFailedPrecondition},
		{ociimage.ErrPartsUnbound, errdefs.ErrFailedPrecondition},
		{ErrImageMismatch, errdefs.ErrFailedPrecondition},
		{ociimage.ErrDecrypt, errdefs.ErrFailedPrecondition},
		{ociimage.ErrNotCheckpointImage, errdefs.ErrInvalidArgument},
		{ociimage.ErrNotFound, errdefs.ErrNotFound},
		{ociimage.ErrTransfer, errdefs.ErrUnavailable},
		{imagerestore.ErrNotContainerCheckpoint, errdefs.ErrInvalidArgument},
		{imagerestore.ErrBadAnnotation, errdefs.ErrInvalidArgument},
	} {
		wrapped := fmt.Errorf("step: %w", c.sentinel)
		if got := report.ClassIn(wrapped); got != c.class {
			t.Errorf("%v: class %v, want %v", c.sentinel, got, c.class)
		}
		got := errgrpc.ToNative(toGRPC(wrapped, false))
		if want := c.class.Error() + ": " + wrapped.Error(); !strings.HasPrefix(got.Error(), want) || errdefs.Resolve(got) != c.class {
			t.Errorf("reply %q (%v), want %q", got, errdefs.Resolve(got), want)
		}
		// Inside cryo, containerd's classes are containerd's errors only.
		if errors.Is(wrapped, c.class) {
			t.Errorf("%v matches its class with errors.Is", c.sentinel)
		}
	}
	// The two that wrap their class themselves keep it.
	for _, s := range []error{imagerestore.ErrNotAllowed, imagetrust.ErrNotTrusted} {
		if got := status.Convert(toGRPC(fmt.Errorf("x: %w", s), false)).Code(); got != codes.PermissionDenied {
			t.Errorf("%v: %s", s, got)
		}
	}
	// A sentinel without a class stays Unknown.
	if got := status.Convert(toGRPC(fmt.Errorf("x: %w", cuda.ErrNotCUDA), false)).Code(); got != codes.Unknown {
		t.Errorf("unclassed sentinel: %s", got)
	}
	// A wording of a sentinel is it, and has its class.
	if err := fmt.Errorf("find: %w", report.Sentinel("no process to checkpoint", cuda.ErrNoProcess)); !errors.Is(err, cuda.ErrNoProcess) || report.ClassIn(err) != errdefs.ErrNotFound {
		t.Errorf("a wording of cuda.ErrNoProcess: %v", report.ClassIn(err))
	}
}
