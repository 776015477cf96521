package ociimage

import (
	"context"
	"errors"
	"fmt"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// ErrUnpackLimit is an image refused for a tar beyond the unpack limits
// (an *archive.LimitError says which part, which bound, and the remedy).
var ErrUnpackLimit = archive.ErrLimit

// LimitsFrom are the unpack bounds of cfg (CRYO_UNPACK_MAX_*), each
// refusal naming the variable that raises it.
func LimitsFrom(cfg config.Config) archive.Limits {
	u := cfg.Unpack
	return archive.Limits{MaxEntries: u.MaxEntries, MaxDepth: u.MaxDepth, MaxNameBytes: u.MaxNameBytes, MaxPathBytes: u.MaxPathBytes,
		Setting: unpackSetting}
}

// unpackSetting is the variable that raises the bound what.
func unpackSetting(what string) string {
	switch what {
	case archive.LimitEntries:
		return config.EnvUnpackMaxEntries
	case archive.LimitDepth:
		return config.EnvUnpackMaxDepth
	case archive.LimitName:
		return config.EnvUnpackMaxName
	case archive.LimitPath:
		return config.EnvUnpackMaxPath
	}
	return ""
}

// extractOptions bound the extraction of layer l: the image's budget, the
// limits, and the part's name for a refusal.
func extractOptions(l ocispec.Descriptor, budget *archive.Budget, lim archive.Limits) archive.Options {
	name := "layer " + l.Digest.String()
	if isCheckpointBlob(l) {
		name = "checkpoint part " + l.Digest.String()
		if p := l.Annotations[AnnLayerPart]; p != "" {
			name += " (" + p + ")"
		}
	}
	if lim.Setting == nil {
		lim.Setting = unpackSetting
	}
	return archive.Options{Budget: budget, Limits: lim, Part: name}
}

// stoppedEarly is an extraction refused for its bounds or cut off by its
// context: neither says the layer is corrupt, so neither is reported as
// such (nor the image deleted for it).
func stoppedEarly(err error) bool {
	return errors.Is(err, archive.ErrLimit) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, config.ErrRestoreDeadline)
}

// verifiedWithin is the verification's error, else ctx's cause when ctx
// ended during it: the hashing of the files does not stop midway, and a
// restore past its deadline must not go on to CRIU.
func verifiedWithin(ctx context.Context, err error) error {
	if err == nil && ctx.Err() != nil {
		return fmt.Errorf("verification of the unpacked files ended past the deadline: %w", context.Cause(ctx))
	}
	return err
}
