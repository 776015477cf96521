package ociimage

import (
	"encoding/json"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Spec annotations that checkpointctl reads to tell the engine and name a
// container: "libpod" or "cri-o" in annManager make it Podman's or
// CRI-O's; any other checkpoint is containerd's to it, named by
// annCRIContainerName only.
const (
	annManager          = "io.container.manager"
	annCRIContainerName = "io.kubernetes.cri.container-name"
)

// completeConfig returns config.dump with what checkpointctl shows filled
// in where the checkpoint's own lacks it (a bare process has none; an image
// of a containerd checkpoint built by an older cryo has no times): id,
// name, base image, runtime, and the creation and checkpoint times, which
// it prints as 0001-01-01 when zero. Fields it does not know stay as they
// are, and an engine's own config.dump (Podman's, the kubelet's) is left
// alone: they restore from it.
func completeConfig(raw []byte, m exportMeta) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	if raw != nil {
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, fmt.Errorf("%s is not a JSON object (%v): %w", configDumpName, err, ErrIntegrity)
		}
	}
	var c exportConfig
	if raw != nil {
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("%s: %v: %w", configDumpName, err, ErrIntegrity)
		}
		if !cryoWritten(m.kind) {
			return raw, nil
		}
	}
	changed := false
	fill := func(key string, have bool, v any) {
		if !have {
			fields[key], _ = json.Marshal(v)
			changed = true
		}
	}
	fill("id", c.ID != "", m.name)
	fill("name", c.Name != "", m.name)
	fill("rootfsImageName", c.RootfsImageName != "" || m.baseImage == "", m.baseImage)
	fill("runtime", c.OCIRuntime != "" || m.runtime == "", m.runtime)
	fill("checkpointedTime", !c.CheckpointedAt.IsZero() || m.checkpointed.IsZero(), m.checkpointed.UTC())
	// A bare process's start is not recorded; the checkpoint time bounds it.
	fill("createdTime", !c.CreatedTime.IsZero() || m.checkpointed.IsZero(), m.checkpointed.UTC())
	if cryoWritten(m.kind) {
		fill("cryoKind", c.CryoKind != "", m.kind)
	}
	if !changed {
		return raw, nil
	}
	return json.MarshalIndent(fields, "", "  ")
}

// completeSpec returns spec.dump, which checkpointctl requires: a bare
// process gets a spec with annotations only. A checkpoint that neither
// Podman nor CRI-O took (a bare process, a `ctr` checkpoint) is named in
// checkpointctl only by annCRIContainerName, so the export's copy of its
// spec gets it; the image's spec.dump, which a restore gives the new
// container, stays as containerd recorded it.
func completeSpec(raw []byte, m exportMeta) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	if raw == nil {
		fields["ociVersion"], _ = json.Marshal(specs.Version)
	} else if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object (%v): %w", SpecDumpName, err, ErrIntegrity)
	}
	ann := map[string]string{}
	if a, ok := fields["annotations"]; ok {
		if err := json.Unmarshal(a, &ann); err != nil {
			return nil, fmt.Errorf("%s: annotations: %v: %w", SpecDumpName, err, ErrIntegrity)
		}
	}
	if raw != nil && (namesItself(ann) || !cryoWritten(m.kind) || m.name == "") {
		return raw, nil
	}
	if m.name != "" && !namesItself(ann) {
		ann[annCRIContainerName] = m.name
	}
	if raw == nil {
		ann[AnnKind] = string(m.kind)
	}
	fields["annotations"], _ = json.Marshal(ann)
	return json.MarshalIndent(fields, "", "  ")
}

// cryoWritten: the kinds whose config.dump cryo writes (or, for a bare
// process, that have none); Podman's, CRI-O's and the kubelet's are their
// engines' own, which restore from them.
func cryoWritten(k Kind) bool { return k == KindProcess || k == KindContainerd }

// namesItself reports whether checkpointctl finds the container's engine
// and name in these spec annotations already.
func namesItself(ann map[string]string) bool {
	switch ann[annManager] {
	case "libpod", "cri-o":
		return true
	}
	return ann[annCRIContainerName] != ""
}
