package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/version"
)

// statusWriter writes one Checkpoint's status as the agent goes, so that
// `kubectl get checkpoint -w` moves: each write reads the object afresh
// and is retried on a conflict, and none overwrites a final phase that
// someone else (the controller's timeout) wrote meanwhile.
type statusWriter struct {
	c       client.Client
	key     client.ObjectKey
	timings []cryov1.StepTiming
}

// ErrEnded is a Checkpoint that reached a final phase while the agent
// still worked on it.
var ErrEnded = errors.New("the Checkpoint already ended")

func (s *statusWriter) update(ctx context.Context, mutate func(*cryov1.CheckpointStatus)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cp := &cryov1.Checkpoint{}
		if err := s.c.Get(ctx, s.key, cp); err != nil {
			return err
		}
		if cp.Status.Phase.Done() {
			return fmt.Errorf("%w (%s%s)", ErrEnded, cp.Status.Phase, failureText(cp.Status.Failure))
		}
		mutate(&cp.Status)
		cp.Status.StepTimings = append([]cryov1.StepTiming(nil), s.timings...)
		cp.Status.ObservedGeneration = cp.Generation
		return s.c.Status().Update(ctx, cp)
	})
}

func failureText(f *cryov1.Failure) string {
	if f == nil {
		return ""
	}
	return ": " + f.Cause
}

// timed runs one step and records how long it took.
func (s *statusWriter) timed(step string, f func() error) error {
	began := time.Now()
	err := f()
	s.timings = append(s.timings, cryov1.StepTiming{Step: step, Duration: metav1.Duration{Duration: time.Since(began).Round(time.Millisecond)}})
	return err
}

// insertAfter records the steps of cryo's shim (from the checkpoint's
// manifest: the CUDA suspend, the CRIU dump, …) after the agent's step
// that ran them, named shim/STEP: the kubelet's time split into cryo's.
func (s *statusWriter) insertAfter(step string, steps []manifest.Step) {
	at := len(s.timings)
	for i, t := range s.timings {
		if t.Step == step {
			at = i + 1
		}
	}
	var add []cryov1.StepTiming
	for _, st := range steps {
		add = append(add, cryov1.StepTiming{Step: "shim/" + st.Name, Duration: metav1.Duration{Duration: st.Duration().Round(time.Millisecond)}})
	}
	s.timings = append(s.timings[:at], append(add, s.timings[at:]...)...)
}

func (s *statusWriter) progress(ctx context.Context, phase cryov1.Phase, percent int32) error {
	return s.update(ctx, func(st *cryov1.CheckpointStatus) { st.Phase, st.Progress = phase, percent })
}

// succeed records the pushed image and what the checkpoint's manifest
// says of the GPUs, the driver and the cryo that took it.
func (s *statusWriter) succeed(ctx context.Context, image string, sum *ociimage.Summary) error {
	return s.update(ctx, func(st *cryov1.CheckpointStatus) {
		now := metav1.Now()
		st.Phase, st.Progress, st.Image, st.CompletionTime, st.Failure = cryov1.PhaseSucceeded, 100, image, &now, nil
		st.ImageSize = sum.Sizes.Compressed
		// The push's count, whether or not a sample caught it running.
		st.BytesDone, st.BytesTotal = st.ImageSize, st.ImageSize
		st.GPUs = gpusOf(sum)
		st.DriverBranch = driverBranch(sum.Driver)
		st.CUDAVersion = cudaVersion(sum.CUDA)
		st.CryoVersion = sum.Versions.Cryo
		if st.CryoVersion == "" {
			st.CryoVersion = version.String()
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: cryov1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: "Pushed", Message: "the checkpoint image is " + image})
	})
}

// fail records f as the Checkpoint's end.
func (s *statusWriter) fail(ctx context.Context, f cryov1.Failure) error {
	return s.update(ctx, func(st *cryov1.CheckpointStatus) {
		now := metav1.Now()
		st.Phase, st.CompletionTime, st.Failure = cryov1.PhaseFailed, &now, &f
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: cryov1.ConditionFailed, Status: metav1.ConditionTrue,
			Reason: reasonOf(f.Cause), Message: f.Cause})
	})
}

// gpusOf groups the GPUs of the checkpoint's manifest by model.
func gpusOf(sum *ociimage.Summary) []cryov1.GPU {
	var out []cryov1.GPU
	at := map[string]int{}
	for _, g := range sum.GPUs {
		model := strings.ReplaceAll(g.Name, " ", "-")
		i, ok := at[model]
		if !ok {
			i = len(out)
			at[model] = i
			out = append(out, cryov1.GPU{Model: model, MemoryMiB: int64(g.Memory >> 20)})
		}
		out[i].Count++
	}
	return out
}

// driverBranch is the major number of a driver version: 580 of 580.159.04.
func driverBranch(v string) string {
	b, _, _ := strings.Cut(v, ".")
	return b
}

// cudaVersion renders the driver's CUDA version number (13000) as 13.0.
func cudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return strconv.Itoa(v/1000) + "." + strconv.Itoa(v%1000/10)
}

// failureOf splits a failure into the step, the cause and the remedy
// that report.StepError carries. The cause begins with a reason word, as
// the API asks.
func failureOf(err error) cryov1.Failure {
	f := cryov1.Failure{Step: "checkpoint"}
	var se *report.StepError
	if errors.As(err, &se) && se.Step != "" {
		f.Step = se.Step
	}
	cause, remedy, _ := report.Split(err.Error())
	f.Cause, f.Remedy = reasonFor(f.Step)+": "+cause, remedy
	return f
}

// reasonFor is the reason word of a failed step.
func reasonFor(step string) string {
	switch step {
	case stepTag:
		return cryov1.ReasonInvalidTag
	case stepSecret:
		return "PushSecret"
	case stepKubelet:
		return "KubeletCheckpointFailed"
	case stepBuild:
		return "BuildFailed"
	case stepPush:
		return "PushFailed"
	}
	return "CheckpointFailed"
}

// reasonOf is the reason word a cause begins with.
func reasonOf(cause string) string {
	r, _, _ := strings.Cut(cause, ":")
	return r
}
